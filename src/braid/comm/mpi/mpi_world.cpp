#include "comm/mpi/mpi_world.h"

#include <vector>

#include "comm/mpi/mpi_error.h"
#include "comm/mpi/mpi_transport.h"
#include "core/error.h"

namespace braid::comm {

std::shared_ptr<Group> mpi_world(GroupOptions options, MpiCollectives collectives) {
  ensure_mpi_initialized();
  auto group = Group::world(std::make_shared<MpiTransport>(MPI_COMM_WORLD), options);
  if (collectives == MpiCollectives::mpi) use_mpi_backend(*group);
  return group;
}

void use_mpi_backend(Group& group, MpiBackendOptions options) {
  auto* transport = dynamic_cast<MpiTransport*>(&group.transport());
  BRAID_CHECK(transport != nullptr, "use_mpi_backend: the group runs over the '",
              group.transport().name(),
              "' transport; MPI collectives need a group from mpi_world() (or its sub-groups)");
  const std::vector<int>& members = group.members();
  bool whole = group.size() == transport->size();
  for (int r = 0; whole && r < group.size(); ++r) whole = members[static_cast<size_t>(r)] == r;
  if (whole) {
    group.set_backend(std::make_shared<MpiBackend>(transport->spare_comm(), options));
    return;
  }
  // Only the members take part in MPI_Comm_create_group, as only they hold the Group. It
  // runs on the spare communicator: its internal messages would otherwise meet the
  // transport's header probe.
  const int rank = transport->rank();
  MPI_Group all = MPI_GROUP_NULL, mine = MPI_GROUP_NULL;
  mpi_check(MPI_Comm_group(transport->spare_comm(), &all), "MPI_Comm_group", rank);
  int rc = MPI_Group_incl(all, group.size(), members.data(), &mine);
  MPI_Group_free(&all);
  mpi_check(rc, "MPI_Group_incl", rank);
  MPI_Comm comm = MPI_COMM_NULL;
  // The group's channel (agreed by its members, distinct between groups) as the tag, so
  // overlapping groups' constructions can never be confused.
  const int tag = static_cast<int>(group.channel() % 32768);  // 32767: MPI's least MPI_TAG_UB
  rc = MPI_Comm_create_group(transport->spare_comm(), mine, tag, &comm);
  MPI_Group_free(&mine);
  mpi_check(rc, "MPI_Comm_create_group", rank);
  std::shared_ptr<MpiBackend> backend;
  try {
    backend = std::make_shared<MpiBackend>(comm, options);
  } catch (...) {
    MPI_Comm_free(&comm);
    throw;
  }
  MPI_Comm_free(&comm);
  group.set_backend(std::move(backend));
}

}  // namespace braid::comm
