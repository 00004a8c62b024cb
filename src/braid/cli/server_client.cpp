#include "cli/server_client.h"

#include <httplib.h>

#include <cstdlib>

#include "core/error.h"

namespace braid::cli {
namespace {

std::string env_or(const std::string& given, const char* name, const std::string& fallback) {
  if (!given.empty()) return given;
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

}  // namespace

ServerClient::ServerClient(ServerFlags flags) : flags_(std::move(flags)) {
  flags_.server = env_or(flags_.server, "BRAID_SERVER", "http://127.0.0.1:8470");
  flags_.token = env_or(flags_.token, "BRAID_TOKEN", "");
  flags_.ca_cert = env_or(flags_.ca_cert, "BRAID_CA_CERT", "");
  BRAID_CHECK(flags_.server.rfind("http://", 0) == 0 || flags_.server.rfind("https://", 0) == 0,
              "--server '", flags_.server, "': give it as http://HOST:PORT or https://HOST:PORT");
  BRAID_CHECK(!flags_.token.empty(),
              "no token: pass --token or set BRAID_TOKEN (braid serve wrote the admin's to "
              "DATA_DIR/admin-token; an admin makes yours)");
  http_ = std::make_unique<httplib::Client>(flags_.server);
  BRAID_CHECK(http_->is_valid(), "--server '", flags_.server, "' is not a server address");
  if (!flags_.ca_cert.empty()) http_->set_ca_cert_path(flags_.ca_cert.c_str());
  http_->set_bearer_token_auth(flags_.token.c_str());
  http_->set_keep_alive(true);   // a worker calls every second: one connection
  http_->set_tcp_nodelay(true);  // small requests on a kept connection: no 40 ms delayed ACK
  http_->set_connection_timeout(5);
  http_->set_read_timeout(30);
}

ServerClient::~ServerClient() = default;

namespace {

nlohmann::json answer(const httplib::Result& r, const std::string& server, const char* method,
                      const std::string& path) {
  if (!r)
    BRAID_THROW(IoError, "cannot reach braid serve at ", server, " (", method, " ", path,
                "): ", httplib::to_string(r.error()),
                "; is it running, and is --server (or BRAID_SERVER) its address?");
  nlohmann::json body;
  try {
    body = nlohmann::json::parse(r->body);
  } catch (const nlohmann::json::parse_error&) {
    body = nlohmann::json::object();
  }
  if (r->status >= 200 && r->status < 300) return body;
  BRAID_THROW(Error, "braid serve at ", server, " answered ", r->status, " to ", method, " ", path,
              ": ", body.value("error", r->body));
}

}  // namespace

nlohmann::json ServerClient::get(const std::string& path) {
  return answer(http_->Get(path), flags_.server, "GET", path);
}

nlohmann::json ServerClient::post(const std::string& path, const nlohmann::json& body) {
  return answer(http_->Post(path, body.dump(), "application/json"), flags_.server, "POST", path);
}

nlohmann::json ServerClient::put_bytes(const std::string& path, const std::string& bytes) {
  return answer(http_->Put(path, bytes, "application/octet-stream"), flags_.server, "PUT", path);
}

std::string ServerClient::get_bytes(const std::string& path) {
  const httplib::Result r = http_->Get(path);
  if (r && r->status == 200) return r->body;
  answer(r, flags_.server, "GET", path);  // throws, saying why
  return {};
}

}  // namespace braid::cli
