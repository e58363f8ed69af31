"""DeepSpeed's process topologies, as far as a pipeline of Python layers uses them: the
sizes of the pipe and data axes (the engine lays ranks out as DeepSpeed does, data fastest)."""


class ProcessTopology:
    def __init__(self, axes, dims):
        self.axes = list(axes)
        self.dims = list(dims)
        unknown = [axis for axis in self.axes if axis not in ("pipe", "data")]
        if unknown:
            raise ValueError(
                f"pipetrain: a topology axis {unknown[0]!r} with Python layers: tensor, sequence, "
                "context and expert parallelism need the native families (pipe and data only)")

    def get_dim(self, axis):
        return self.dims[self.axes.index(axis)] if axis in self.axes else 1

    def world_size(self):
        size = 1
        for dim in self.dims:
            size *= dim
        return size


class PipeDataParallelTopology(ProcessTopology):
    def __init__(self, num_pp, num_dp):
        super().__init__(axes=["pipe", "data"], dims=[num_pp, num_dp])


class PipeModelDataParallelTopology(ProcessTopology):
    def __init__(self, num_pp, num_mp, num_dp):
        if num_mp != 1:
            raise ValueError(
                "pipetrain: model (tensor) parallelism with Python layers: it needs the native "
                "families, whose layers split themselves (pipe and data only here)")
        super().__init__(axes=["pipe", "data"], dims=[num_pp, num_dp])
