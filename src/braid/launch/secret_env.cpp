// read_secret: BRAID_SECRET, else BRAID_SECRET_FILE. Messages name the variable and never
// echo the secret.
#include "launch/secret_env.h"

#include "core/error.h"

namespace braid::launch {

comm::Secret read_secret(const GetEnv& getenv) {
  if (const char* hex = getenv("BRAID_SECRET"); hex && *hex)
    return comm::Secret::from_supplied_hex(hex, "BRAID_SECRET");
  if (const char* path = getenv("BRAID_SECRET_FILE"); path && *path) {
    try {
      return comm::Secret::from_file(path);
    } catch (const IoError& e) {
      BRAID_THROW(IoError, "BRAID_SECRET_FILE: ", e.what());
    } catch (const Error& e) {
      BRAID_THROW(Error, "BRAID_SECRET_FILE: ", e.what());
    }
  }
  return comm::Secret();
}

}  // namespace braid::launch
