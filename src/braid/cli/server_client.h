// The client side of braid serve's API for the CLI (braid submit, status, logs, cancel,
// worker): where the server is and who is asking, from flags or the environment
// (BRAID_SERVER, BRAID_TOKEN, BRAID_CA_CERT), and one call that returns the JSON answer or
// throws an error saying what the server said (its status and message) or why it could not
// be reached.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace httplib {
class Client;
}

namespace braid::cli {

struct ServerFlags {
  std::string server;   // http(s)://host:port; default BRAID_SERVER, else http://127.0.0.1:8470
  std::string token;    // default BRAID_TOKEN
  std::string ca_cert;  // HTTPS: the CA (or self-signed) certificate to trust; BRAID_CA_CERT
};

class ServerClient {
 public:
  explicit ServerClient(ServerFlags flags);
  ~ServerClient();
  ServerClient(const ServerClient&) = delete;
  ServerClient& operator=(const ServerClient&) = delete;

  nlohmann::json get(const std::string& path);
  nlohmann::json post(const std::string& path, const nlohmann::json& body);
  nlohmann::json put_bytes(const std::string& path, const std::string& bytes);
  // The raw bytes of a GET (a job's file).
  std::string get_bytes(const std::string& path);
  const std::string& url() const { return flags_.server; }

 private:
  ServerFlags flags_;
  std::unique_ptr<httplib::Client> http_;
};

}  // namespace braid::cli
