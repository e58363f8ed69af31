#pragma once

#include <memory>
#include <string>

#include "pipetrain/comm/mpi_communicator.h"

// Hugging Face transformers model folders in and out (GPT2LMHeadModel, LlamaForCausalLM).
namespace pipetrain::trainer {

// `pipetrain import --hf FOLDER --out CHECKPOINT`, on a job of one rank: reads config.json
// and model.safetensors (or the shards model.safetensors.index.json names), checks every
// tensor's name and shape against the model config.json describes, and saves a pipetrain
// checkpoint (tag step_0, no optimizer state) that train --load, eval, generate and logits
// read at any layout. InputError naming the file and field or tensor for anything else.
// `ranks`: the job's, of one rank (default the MPI world, which must be one rank).
int import_hugging_face(const std::string& folder, const std::string& out,
                        std::shared_ptr<comm::MpiCommunicator> ranks = nullptr);

// `pipetrain export --format hf`: a checkpoint's model as config.json and model.safetensors
// in `out`, which transformers' AutoModelForCausalLM.from_pretrained loads; a LoRA
// fine-tune's adapters merged into the weights they adapt (W + alpha / rank · B A).
void export_hugging_face(const std::string& checkpoint, const std::string& tag,
                         const std::string& out);

// `pipetrain export --format peft`: a LoRA fine-tune's adapters alone, as
// adapter_config.json and adapter_model.safetensors in `out`, which peft's
// PeftModel.from_pretrained loads onto the transformers model the base exports to.
void export_peft(const std::string& checkpoint, const std::string& tag, const std::string& out);

}  // namespace pipetrain::trainer
