#include "models/packed_documents.h"

#include <ATen/ATen.h>

namespace pipetrain::models {

at::Tensor document_positions(const at::Tensor& documents) {
  const int64_t seq = documents.size(1);
  const at::Tensor index = at::arange(seq, documents.options()).expand_as(documents);
  // A document starts where the document id changes (and at the window's first token).
  at::Tensor starts = at::ones_like(documents, documents.options().dtype(at::kBool));
  if (seq > 1) {
    starts.narrow(1, 1, seq - 1)
        .copy_(documents.narrow(1, 1, seq - 1) != documents.narrow(1, 0, seq - 1));
  }
  const at::Tensor first = std::get<0>(at::where(starts, index, at::zeros_like(index)).cummax(1));
  return index - first;
}

at::Tensor document_mask(const at::Tensor& documents) {
  const int64_t seq = documents.size(1);
  const at::Tensor causal = at::ones({seq, seq}, documents.options().dtype(at::kBool)).tril();
  return ((documents.unsqueeze(2) == documents.unsqueeze(1)) & causal).unsqueeze(1);
}

}  // namespace pipetrain::models
