//===- Driver.h - amp-opt's main, kept in a library -------------*- C++ -*-===//
#pragma once

namespace ampc {

/// The whole of amp-opt: parses the command line, imports, runs passes, emits.
int ampOptMain(int argc, char **argv);

} // namespace ampc
