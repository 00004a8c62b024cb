// The job's secret, as a rank finds it in its environment: BRAID_SECRET (hex), else the
// file BRAID_SECRET_FILE names, else none. comm/ reads no environment; join_job reads the
// secret here and hands it to the store and the transport. Pure: reads variables through
// `getenv`, so tests pass their own.
#pragma once

#include "comm/secret.h"
#include "launch/env.h"

namespace braid::launch {

// An empty secret when neither variable is set (an empty value counts as unset, so
// `BRAID_SECRET= cmd` clears an inherited one). Error naming the variable when a value is
// not a secret or is shorter than comm::Secret::kMinBytes, or the file is not private;
// IoError naming the variable and the file when the file cannot be read.
comm::Secret read_secret(const GetEnv& getenv = ::getenv);

}  // namespace braid::launch
