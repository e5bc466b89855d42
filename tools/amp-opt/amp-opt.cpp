//===- amp-opt.cpp - The ampc compiler driver ------------------------------===//
//
// Imports an ONNX model, runs passes (alone, in a pipeline, or the training
// pipeline of --train) and emits ONNX text, ONNX, a report, Graphviz or an
// executable plan. Like mlir-opt, each registered pass is also a flag.
//
//===----------------------------------------------------------------------===//

#include "ampc/Driver/Driver.h"

int main(int argc, char **argv) { return ampc::ampOptMain(argc, argv); }
