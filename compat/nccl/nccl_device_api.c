/* The host functions of NCCL 2.28's device API (nccl_device.h: device communicators, LSA and GIN barriers,
 * the LL all-to-all, teams). libcomm has no device-side API: the calls that set one up return
 * ncclInvalidUsage with a WARN saying so, and the team queries answer for the world team only (a team is
 * arithmetic: nRanks, this rank's index, and the stride between members' world ranks). As in nccl_compat.c and
 * in NCCL, each function is pncclX with ncclX a weak alias (the profiling interface).
 * SPDX-License-Identifier: Apache-2.0 */
#include <stdint.h>

#include "comm.h"
#include "debug.h"
#include "nccl.h"

#define EXPORT __attribute__((visibility("default")))

/* nccl_device.h's ncclTeam_t, returned and passed by value. */
typedef struct {
  int nRanks, rank, stride;
} ncclTeamAbi;

static ncclResult_t noDeviceApi(const char* fn) {
  WARN("%s: libcomm does not provide NCCL's device API (nccl_device.h); use the host collectives", fn);
  return ncclInvalidUsage;
}

EXPORT ncclResult_t pncclDevCommCreate(ncclComm_t comm, const void* reqs, void* outDevComm) {
  (void)comm, (void)reqs, (void)outDevComm;
  return noDeviceApi("ncclDevCommCreate");
}
EXPORT ncclResult_t pncclDevCommDestroy(ncclComm_t comm, const void* devComm) {
  (void)comm, (void)devComm;
  return noDeviceApi("ncclDevCommDestroy");
}
EXPORT ncclResult_t pncclGinBarrierCreateRequirement(ncclComm_t comm, ncclTeamAbi team, int nBarriers, void* outHandle,
                                                     void* outReq) {
  (void)comm, (void)team, (void)nBarriers, (void)outHandle, (void)outReq;
  return noDeviceApi("ncclGinBarrierCreateRequirement");
}
EXPORT ncclResult_t pncclLsaBarrierCreateRequirement(ncclTeamAbi team, int nBarriers, void* outHandle, void* outReq) {
  (void)team, (void)nBarriers, (void)outHandle, (void)outReq;
  return noDeviceApi("ncclLsaBarrierCreateRequirement");
}
EXPORT ncclResult_t pncclLLA2ACreateRequirement(int nBlocks, int nSlots, void* outHandle, void* outReq) {
  (void)nBlocks, (void)nSlots, (void)outHandle, (void)outReq;
  return noDeviceApi("ncclLLA2ACreateRequirement");
}
EXPORT int pncclLLA2ACalcSlots(int maxElts, int maxEltSize) {
  (void)maxElts, (void)maxEltSize;
  noDeviceApi("ncclLLA2ACalcSlots");
  return 0;
}

/* The world team: every rank, stride 1. */
EXPORT ncclTeamAbi pncclTeamWorld(ncclComm_t comm) {
  ncclTeamAbi t = {0, 0, 1};
  if (commCount((comm_t)comm, &t.nRanks) != commSuccess || commUserRank((comm_t)comm, &t.rank) != commSuccess)
    t = (ncclTeamAbi){0, 0, 1};
  return t;
}
/* Load-store-accessible and rail teams belong to the device API: this rank alone, with the WARN. */
EXPORT ncclTeamAbi pncclTeamLsa(ncclComm_t comm) {
  (void)comm;
  noDeviceApi("ncclTeamLsa");
  return (ncclTeamAbi){1, 0, 1};
}
EXPORT ncclTeamAbi pncclTeamRail(ncclComm_t comm) {
  (void)comm;
  noDeviceApi("ncclTeamRail");
  return (ncclTeamAbi){1, 0, 1};
}
/* The world rank of member `rank` of `team`, as NCCL's arithmetic teams define it; -1 when out of range. */
EXPORT int pncclTeamRankToWorld(ncclComm_t comm, ncclTeamAbi team, int rank) {
  int me = 0;
  if (rank < 0 || rank >= team.nRanks || commUserRank((comm_t)comm, &me) != commSuccess) return -1;
  return me + (rank - team.rank) * team.stride;
}
EXPORT int pncclTeamRankToLsa(ncclComm_t comm, ncclTeamAbi team, int rank) {
  (void)comm, (void)team, (void)rank;
  noDeviceApi("ncclTeamRankToLsa");
  return -1;
}

/* ncclX: weak aliases of pncclX. */
#pragma weak ncclDevCommCreate = pncclDevCommCreate
#pragma weak ncclDevCommDestroy = pncclDevCommDestroy
#pragma weak ncclGinBarrierCreateRequirement = pncclGinBarrierCreateRequirement
#pragma weak ncclLsaBarrierCreateRequirement = pncclLsaBarrierCreateRequirement
#pragma weak ncclLLA2ACreateRequirement = pncclLLA2ACreateRequirement
#pragma weak ncclLLA2ACalcSlots = pncclLLA2ACalcSlots
#pragma weak ncclTeamWorld = pncclTeamWorld
#pragma weak ncclTeamLsa = pncclTeamLsa
#pragma weak ncclTeamRail = pncclTeamRail
#pragma weak ncclTeamRankToWorld = pncclTeamRankToWorld
#pragma weak ncclTeamRankToLsa = pncclTeamRankToLsa
