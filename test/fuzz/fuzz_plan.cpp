//===- fuzz_plan.cpp - amp-run's plan loader and one step -----------------===//
//
// The input is a plan's protobuf payload: the target writes it as a plan
// file (header, message, data section, correct checksums, so mutants reach
// the validation behind them; mutated `data_offset`s stay as they are), loads it on the CPU backend and runs one step of each program with
// zero-filled feeds. Plans asking for more than 64 MiB of memory are
// skipped (the loader's own limit is the machine's).
//
//===----------------------------------------------------------------------===//

#include "FuzzUtil.h"

#include "ampc/rt/Backend.h"
#include "ampc/rt/PlanFile.h"
#include "ampc/rt/Session.h"

#include "plan.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static bool quiet = (ampc::rt::silenceProtobufLog(), true);
  (void)quiet;
  if (size > ampc::fuzz::kMaxInput)
    return 0;
  ampc::plan::Plan p;
  if (!p.ParseFromArray(data, static_cast<int>(size)))
    return 0;
  // The header and checksum of a plan file around the payload, then the
  // file reader's own path: what amp-run does with a plan on disk.
  std::string bytes, error;
  if (!ampc::rt::serializePlan(p, bytes, error))
    return 0;
  ampc::plan::Plan loaded;
  if (!ampc::rt::parsePlanBytes(bytes, "fuzz.plan", loaded, error))
    return 0;
  uint64_t total = loaded.memory().arena_bytes();
  for (const auto &t : loaded.tensors())
    total += t.data().size();
  if (total > (64u << 20))
    return 0;
  auto session = ampc::rt::Session::fromPlan(loaded, ampc::rt::createCpuBackend({1}), error);
  if (!session)
    return 0;
  for (int i = 0; i < loaded.programs_size(); ++i) {
    for (const auto &b : loaded.programs(i).inputs()) {
      ampc::rt::HostArray a;
      if (!session->readTensor(b.tensor(), a, error) ||
          !session->feed(i, b.name(), a, "fuzz", error))
        return 0;
    }
    session->run(i, error);
  }
  return 0;
}
