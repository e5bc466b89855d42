//===- amp-opt.cpp - The ampc compiler driver ------------------------------===//
//
// Imports an ONNX model, runs passes (alone, in a pipeline, or the training
// pipeline of --train) and emits ONNX text, ONNX, a report, Graphviz or an
// executable plan. Like mlir-opt, each registered pass is also a flag.
//
//===----------------------------------------------------------------------===//

#include "ampc/Driver/Driver.h"

#ifdef AMPC_WITH_MIMALLOC
#include <mimalloc.h>
#endif

int main(int argc, char **argv) {
#ifdef AMPC_WITH_MIMALLOC
  // A compile lives for seconds: memory it frees is reused, not given back
  // to the OS and faulted in again (a quarter of the page faults of a
  // 20,000-node graph, which grew faster than the graph).
  mi_option_disable(mi_option_allow_decommit);
#endif
  return ampc::ampOptMain(argc, argv);
}
