/* test_net_name NAME: commConfig_t.netName picks the built-in network. Two ranks as threads, each with
 * config.netName = NAME ("IB" or "Socket"), shared memory off so that they connect through the network
 * (with COMM_IB_FAKE set by the test, IB runs over the in-process fake device): an allreduce must be right,
 * and the INFO log must say the network came from the config and that the connections use it. Exit 77
 * (skipped) when NAME is IB and this build has no IB transport. Public API only. */
#include <comm.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static commUniqueId id;
static const char* name;
static int ok[2];

static void* rankMain(void* arg) {
  int rank = (int)(long)arg;
  commConfig_t config = COMM_CONFIG_INITIALIZER;
  config.netName = name;
  comm_t comm;
  if (commInitRankConfig(&comm, 2, id, rank, &config) != commSuccess) return NULL;
  float v[5] = {1.0f, 2.0f, 3.0f, 4.0f, (float)rank};
  ok[rank] = commAllReduce(v, v, 5, commFloat32, commSum, comm, NULL) == commSuccess && v[0] == 2.0f && v[3] == 8.0f &&
             v[4] == 1.0f;
  commFinalize(comm);
  commDestroy(comm);
  return NULL;
}

/* Does the log hold a line containing `what`? */
static int logHas(const char* path, const char* what) {
  FILE* f = fopen(path, "r");
  if (f == NULL) return 0;
  char line[1024];
  int found = 0;
  while (!found && fgets(line, sizeof(line), f)) found = strstr(line, what) != NULL;
  fclose(f);
  return found;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_net_name IB|Socket\n");
    return 2;
  }
  name = argv[1];
  char log[256];
  snprintf(log, sizeof(log), "test_net_name.%s.log", name);
  remove(log);
  setenv("COMM_SHM_DISABLE", "1", 1);
  setenv("COMM_DEBUG", "INFO", 1);
  setenv("COMM_DEBUG_SUBSYS", "NET,INIT", 1);
  setenv("COMM_DEBUG_FILE", log, 1);
  if (commGetUniqueId(&id) != commSuccess) return 1;
  pthread_t t[2];
  for (long r = 0; r < 2; r++) pthread_create(&t[r], NULL, rankMain, (void*)r);
  for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
  char chosen[128], via[64];
  snprintf(chosen, sizeof(chosen), "using the built-in %s network (config netName=%s)", name, name);
  snprintf(via, sizeof(via), "via NET(%s)", name);
  if (!strcmp(name, "IB") && logHas(log, "not built")) {
    printf("test_net_name: SKIP (no IB transport in this build)\n");
    return 77;
  }
  int pass = ok[0] && ok[1] && logHas(log, chosen) && logHas(log, via);
  printf("test_net_name %s: allreduce %s, config choice %s, connections %s: %s\n", name,
         ok[0] && ok[1] ? "right" : "wrong", logHas(log, chosen) ? "logged" : "missing",
         logHas(log, via) ? via : "elsewhere", pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}
