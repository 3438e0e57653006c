/* The IB network plugin's discovery side: the real libibverbs loads (or reports its absence cleanly), and
 * over the fake RDMA device (ib_verbs_fake.h): devices, ports and GIDs through the verbs table, then
 * discovery, the COMM_IB_HCA filter, link speeds and GID selection (transports/net/ib/ib_topo.c). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ib_verbs.h"

#ifndef COMM_HAVE_IBVERBS
int main(void) {
  printf("test_ib_net: built without <infiniband/verbs.h>: skipped\n");
  return 77;
}
#else
#include "debug.h"
#include "ib_topo.h"
#include "ib_verbs_fake.h"

static const commIbVerbs* V;

static int setup(void** state) {
  (void)state;
  commIbFakeResetOptions();
  return 0;
}

static int teardown(void** state) {
  (void)state;
  commIbFakeResetOptions();
  commIbFakeStats s;
  commIbFakeGetStats(&s);
  return s.contexts || s.pds || s.mrs || s.cqs || s.qps ? -1 : 0;
}

/* ---------------------------------------------------------------- the real library */

static void testRealLoad(void** state) {
  (void)state;
  const commIbVerbs* real = NULL;
  char why[256];
  commResult_t res = commIbVerbsLoad(&real, why, sizeof(why));
  if (res != commSuccess) { /* no libibverbs here: a clean failure with a reason */
    assert_int_equal(res, commSystemError);
    assert_null(real);
    assert_true(strlen(why) > 0);
    print_message("libibverbs not loadable: %s\n", why);
  } else {
    assert_non_null(real);
    assert_string_equal(real->name, "libibverbs");
    const commIbVerbs* again = NULL;
    assert_int_equal(commIbVerbsLoad(&again, NULL, 0), commSuccess);
    assert_ptr_equal(again, real);
    assert_non_null(real->wcStatusStr(IBV_WC_RETRY_EXC_ERR));
    /* Without RDMA devices: an empty list, or NULL (ENOSYS) when the kernel has no uverbs at all. */
    int n = -1;
    struct ibv_device** list = real->getDeviceList(&n);
    if (list) {
      assert_true(n >= 0);
      for (int i = 0; i < n; i++) assert_non_null(real->getDeviceName(list[i]));
      real->freeDeviceList(list);
    }
    print_message("libibverbs loaded: %d device(s)\n", list ? n : 0);
  }
  commIbVerbs table;
  res = commIbVerbsLoadFrom("libcomm-no-such-verbs.so.1", &table, why, sizeof(why));
  assert_int_equal(res, commSystemError);
  assert_non_null(strstr(why, "libcomm-no-such-verbs.so.1"));
  res = commIbVerbsLoadFrom("libc.so.6", &table, why, sizeof(why)); /* loads, but is not libibverbs */
  assert_int_equal(res, commSystemError);
  assert_non_null(strstr(why, "lacks symbol ibv_"));
}

/* ---------------------------------------------------------------- discovery */

static void testDiscovery(void** state) {
  (void)state;
  commIbFakeDevice d[3];
  commIbFakeDeviceInit(&d[0], "mlx5_0", IBV_LINK_LAYER_INFINIBAND, 0);
  d[0].nPorts = 2;
  d[0].ports[1] = d[0].ports[0];
  d[0].ports[1].state = IBV_PORT_DOWN;
  d[0].ports[1].lid = 7;
  commIbFakeDeviceInit(&d[1], "mlx5_1", IBV_LINK_LAYER_ETHERNET, 1);
  commIbFakeDeviceInit(&d[2], "mlx5_2", IBV_LINK_LAYER_ETHERNET, 2);
  d[2].ports[0].activeSpeed = 128; /* NDR lanes */
  d[2].ports[0].activeWidth = 1;
  assert_int_equal(commIbFakeConfigure(3, d), 0);

  int n = 0;
  struct ibv_device** list = V->getDeviceList(&n);
  assert_non_null(list);
  assert_int_equal(n, 3);
  assert_null(list[3]);
  assert_string_equal(V->getDeviceName(list[1]), "mlx5_1");
  struct ibv_context* ctx[3];
  for (int i = 0; i < 3; i++) assert_non_null(ctx[i] = V->openDevice(list[i]));
  V->freeDeviceList(list);
  assert_int_equal(commIbFakeConfigure(3, d), EBUSY); /* not while devices are open */

  struct ibv_device_attr da;
  assert_int_equal(V->queryDevice(ctx[0], &da), 0);
  assert_int_equal(da.phys_port_cnt, 2);
  assert_true(da.max_qp_wr >= 1024);
  struct ibv_port_attr pa;
  assert_int_equal(V->queryPort(ctx[0], 1, &pa), 0);
  assert_int_equal(pa.state, IBV_PORT_ACTIVE);
  assert_int_equal(pa.link_layer, IBV_LINK_LAYER_INFINIBAND);
  assert_int_equal(pa.lid, 1);
  assert_int_equal(pa.active_speed, 64);
  assert_int_equal(pa.active_width, 2);
  assert_int_equal(V->queryPort(ctx[0], 2, &pa), 0);
  assert_int_equal(pa.state, IBV_PORT_DOWN);
  assert_int_equal(V->queryPort(ctx[0], 3, &pa), EINVAL);
  assert_int_equal(V->queryPort(ctx[2], 1, &pa), 0);
  assert_int_equal(pa.link_layer, IBV_LINK_LAYER_ETHERNET);
  assert_int_equal(pa.active_speed, 128);
  assert_int_equal(pa.active_width, 1);
  assert_int_equal(pa.lid, 0);

  /* GIDs: the RoCE table lists link-local v1/v2 then IPv4-mapped 10.0.1.1 v1/v2. */
  union ibv_gid gid;
  commIbGidType_t type;
  assert_int_equal(V->queryGid(ctx[1], 1, 3, &gid), 0);
  static const uint8_t mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 1, 1};
  assert_memory_equal(gid.raw, mapped, 16);
  assert_int_equal(V->queryGidType(ctx[1], 1, 3, &type), 0);
  assert_int_equal(type, COMM_IB_GID_TYPE_ROCE_V2);
  assert_int_equal(V->queryGidType(ctx[1], 1, 2, &type), 0);
  assert_int_equal(type, COMM_IB_GID_TYPE_ROCE_V1);
  assert_int_equal(V->queryGid(ctx[1], 1, 0, &gid), 0);
  assert_int_equal(gid.raw[0], 0xfe);
  assert_int_equal(V->queryGid(ctx[1], 1, 5, &gid), 0); /* an unused entry reads as zero */
  static const uint8_t zero[16] = {0};
  assert_memory_equal(gid.raw, zero, 16);
  assert_int_equal(V->queryGidType(ctx[1], 1, 5, &type), ENODATA);
  assert_int_equal(V->queryGid(ctx[1], 1, COMM_IB_FAKE_MAX_GIDS, &gid), EINVAL);
  assert_int_equal(V->queryGidType(ctx[0], 1, 0, &type), 0);
  assert_int_equal(type, COMM_IB_GID_TYPE_IB);

  /* An injected failure of the device list, as libibverbs without the kernel module gives. */
  assert_int_equal(commIbFakeFailCall(COMM_IB_FAKE_CALL_GET_DEVICE_LIST, 0, ENOSYS), 0);
  errno = 0;
  assert_null(V->getDeviceList(&n));
  assert_int_equal(errno, ENOSYS);
  assert_int_equal(n, 0);
  for (int i = 0; i < 3; i++) assert_int_equal(V->closeDevice(ctx[i]), 0);

  assert_int_equal(commIbFakeConfigure(0, NULL), 0); /* no devices at all */
  list = V->getDeviceList(&n);
  assert_non_null(list);
  assert_int_equal(n, 0);
  V->freeDeviceList(list);
  assert_string_equal(commIbLinkLayerStr(IBV_LINK_LAYER_ETHERNET), "Ethernet");
  assert_string_equal(commIbPortStateStr(IBV_PORT_ACTIVE), "ACTIVE");
  assert_string_equal(commIbGidTypeStr(COMM_IB_GID_TYPE_ROCE_V2), "RoCE v2");
}

/* ---------------------------------------------------------------- COMM_IB_HCA */

static int sel(const char* spec, const char* dev, int port) {
  commIbHcaFilter f;
  assert_int_equal(commIbHcaParse(spec, &f), commSuccess);
  return commIbHcaMatch(&f, dev, port);
}

static void testHcaFilter(void** state) {
  (void)state;
  /* Unset, empty, "^" alone: everything. */
  assert_true(sel(NULL, "mlx5_0", 1));
  assert_true(sel("", "mlx5_0", 1));
  assert_true(sel("^", "mlx5_0", 1));
  /* Prefixes, exact names, ports. */
  assert_true(sel("mlx5", "mlx5_10", 1));
  assert_false(sel("mlx5", "bnxt_re0", 1));
  assert_true(sel("mlx5_1", "mlx5_10", 1)); /* a prefix */
  assert_false(sel("=mlx5_1", "mlx5_10", 1));
  assert_true(sel("=mlx5_1", "mlx5_1", 2));
  assert_true(sel("mlx5_0:2,mlx5_1", "mlx5_0", 2));
  assert_false(sel("mlx5_0:2,mlx5_1", "mlx5_0", 1));
  assert_true(sel("mlx5_0:2,mlx5_1", "mlx5_1", 1));
  assert_true(sel(",,=mlx5_0,", "mlx5_0", 1) == 0); /* '=' only counts at the start */
  assert_true(sel("=mlx5_0,,", "mlx5_0", 1));
  /* Exclusion. */
  assert_false(sel("^mlx5_0", "mlx5_0", 1));
  assert_true(sel("^mlx5_0", "mlx5_1", 1));
  assert_false(sel("^=mlx5_0:1", "mlx5_0", 1));
  assert_true(sel("^=mlx5_0:1", "mlx5_0", 2));
  assert_true(sel("^=mlx5_0:1", "mlx5_00", 1));
  commIbHcaFilter f;
  assert_int_equal(commIbHcaParse("^=a:1,b,c:255", &f), commSuccess);
  assert_true(f.exclude && f.exact);
  assert_int_equal(f.n, 3);
  assert_string_equal(f.e[0].name, "a");
  assert_int_equal(f.e[0].port, 1);
  assert_int_equal(f.e[1].port, 0);
  assert_int_equal(f.e[2].port, 255);
  /* Errors name the variable and the entry. */
  static const char* bad[] = {"mlx5_0:", "mlx5_0:x", "mlx5_0:0", "mlx5_0:256", "mlx5_0:1x", ":1", "a,:2"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    commLogClearLastWarn();
    assert_int_equal(commIbHcaParse(bad[i], &f), commInvalidArgument);
    assert_non_null(strstr(commLogLastWarn(), "COMM_IB_HCA"));
  }
  char longName[COMM_IB_NAME_MAX + 8];
  memset(longName, 'x', sizeof(longName) - 1);
  longName[sizeof(longName) - 1] = '\0';
  assert_int_equal(commIbHcaParse(longName, &f), commInvalidArgument);
  char many[4 * (COMM_IB_HCA_MAX + 1) + 1] = "";
  for (int i = 0; i <= COMM_IB_HCA_MAX; i++) strcat(many, "d,");
  assert_int_equal(commIbHcaParse(many, &f), commInvalidArgument);
}

static void testSpeed(void** state) {
  (void)state;
  assert_int_equal(commIbSpeedMbps(64, 2), 200000);  /* HDR 4x */
  assert_int_equal(commIbSpeedMbps(128, 2), 400000); /* NDR 4x */
  assert_int_equal(commIbSpeedMbps(32, 2), 100000);  /* EDR 4x */
  assert_int_equal(commIbSpeedMbps(16, 2), 56000);   /* FDR 4x */
  assert_int_equal(commIbSpeedMbps(128, 1), 100000);
  assert_int_equal(commIbSpeedMbps(1, 8), 30000); /* SDR 12x */
  assert_int_equal(commIbSpeedMbps(64, 16), 100000);
  assert_int_equal(commIbSpeedMbps(3, 2), 0);
  assert_int_equal(commIbSpeedMbps(64, 3), 0);
}

/* ---------------------------------------------------------------- discovery */

/* mlx5_0: InfiniBand, two ports, the second down; mlx5_1: RoCE; mlx5_2: RoCE NDR 1x; mlx5_3: InfiniBand
 * with its port still INIT (no subnet manager yet). */
static void configureFour(void) {
  commIbFakeDevice d[4];
  commIbFakeDeviceInit(&d[0], "mlx5_0", IBV_LINK_LAYER_INFINIBAND, 0);
  d[0].nPorts = 2;
  d[0].ports[1] = d[0].ports[0];
  d[0].ports[1].state = IBV_PORT_DOWN;
  d[0].ports[1].lid = 9;
  commIbFakeDeviceInit(&d[1], "mlx5_1", IBV_LINK_LAYER_ETHERNET, 1);
  commIbFakeDeviceInit(&d[2], "mlx5_2", IBV_LINK_LAYER_ETHERNET, 2);
  d[2].ports[0].activeSpeed = 128;
  d[2].ports[0].activeWidth = 1;
  commIbFakeDeviceInit(&d[3], "mlx5_3", IBV_LINK_LAYER_INFINIBAND, 3);
  d[3].ports[0].state = IBV_PORT_INIT;
  assert_int_equal(commIbFakeConfigure(4, d), 0);
}

static int discover(const char* spec, commIbPort* ports, int max) {
  commIbHcaFilter f;
  assert_int_equal(commIbHcaParse(spec, &f), commSuccess);
  int n = -1;
  assert_int_equal(commIbDiscover(V, &f, ports, max, &n), commSuccess);
  return n;
}

static void testDiscover(void** state) {
  (void)state;
  configureFour();
  commIbPort p[8];
  assert_int_equal(discover(NULL, p, 8), 3); /* the down and the INIT ports are not used */
  assert_string_equal(p[0].devName, "mlx5_0");
  assert_int_equal(p[0].port, 1);
  assert_int_equal(p[0].devIndex, 0);
  assert_int_equal(p[0].linkLayer, IBV_LINK_LAYER_INFINIBAND);
  assert_int_equal(p[0].speedMbps, 200000);
  assert_int_equal(p[0].lid, 1);
  assert_int_equal(p[0].activeMtu, IBV_MTU_4096);
  assert_true(p[0].guid != 0);
  assert_int_equal(p[0].maxQpWr, COMM_IB_FAKE_MAX_QP_WR);
  assert_string_equal(p[1].devName, "mlx5_1");
  assert_int_equal(p[1].linkLayer, IBV_LINK_LAYER_ETHERNET);
  assert_int_equal(p[1].speedMbps, 100000);
  assert_int_equal(p[1].devIndex, 1);
  assert_string_equal(p[2].devName, "mlx5_2");
  assert_int_equal(p[2].speedMbps, 100000);
  assert_true(p[1].guid != p[2].guid);
  /* Filters. */
  assert_int_equal(discover("=mlx5_1", p, 8), 1);
  assert_string_equal(p[0].devName, "mlx5_1");
  assert_int_equal(discover("^mlx5_0", p, 8), 2);
  assert_string_equal(p[0].devName, "mlx5_1");
  assert_int_equal(discover("mlx5_0:2", p, 8), 0); /* selected, but down */
  assert_int_equal(discover("mlx5_2,mlx5_0", p, 8), 2);
  assert_string_equal(p[0].devName, "mlx5_0"); /* device order, not list order */
  assert_int_equal(discover("mlx", p, 2), 2);  /* room for two */
  /* A device that fails to open is skipped (with a WARN), the others are found. */
  assert_int_equal(commIbFakeFailCall(COMM_IB_FAKE_CALL_OPEN_DEVICE, 1, EACCES), 0);
  commLogClearLastWarn();
  assert_int_equal(discover(NULL, p, 8), 2);
  assert_non_null(strstr(commLogLastWarn(), "mlx5_1"));
  assert_string_equal(p[1].devName, "mlx5_2");
  /* A port that fails its query, likewise. */
  assert_int_equal(commIbFakeFailCall(COMM_IB_FAKE_CALL_QUERY_PORT, 0, EIO), 0);
  assert_int_equal(discover(NULL, p, 8), 2);
  assert_string_equal(p[0].devName, "mlx5_1");
  /* No verbs devices (the kernel has no uverbs), and none configured: success with none. */
  assert_int_equal(commIbFakeFailCall(COMM_IB_FAKE_CALL_GET_DEVICE_LIST, 0, ENOSYS), 0);
  assert_int_equal(discover(NULL, p, 8), 0);
  assert_int_equal(commIbFakeConfigure(0, NULL), 0);
  assert_int_equal(discover(NULL, p, 8), 0);
}

/* ---------------------------------------------------------------- GID selection */

static struct ibv_context* openByName(const char* name) {
  int n = 0;
  struct ibv_device** list = V->getDeviceList(&n);
  assert_non_null(list);
  struct ibv_context* ctx = NULL;
  for (int i = 0; i < n && !ctx; i++)
    if (strcmp(V->getDeviceName(list[i]), name) == 0) ctx = V->openDevice(list[i]);
  V->freeDeviceList(list);
  assert_non_null(ctx);
  return ctx;
}

static void testSelectGid(void** state) {
  (void)state;
  commIbFakeDevice d[5];
  commIbFakeDeviceInit(&d[0], "ib", IBV_LINK_LAYER_INFINIBAND, 0);
  commIbFakeDeviceInit(&d[1], "roce", IBV_LINK_LAYER_ETHERNET, 1); /* ll v1, ll v2, 10.0.1.1 v1, v2 */
  /* v2 beats v1 even for a worse address; among v2, a global IPv6 beats link-local; gaps are skipped. */
  commIbFakeDeviceInit(&d[2], "mixed", IBV_LINK_LAYER_ETHERNET, 2);
  commIbFakePort* mp = &d[2].ports[0];
  mp->nGids = 6;
  commIbFakeGidLinkLocal(&mp->gids[0], 0x1122, COMM_IB_GID_TYPE_ROCE_V2);
  commIbFakeGidIpv4(&mp->gids[1], 0xc0a80001u, COMM_IB_GID_TYPE_ROCE_V1);
  memset(&mp->gids[2], 0, sizeof(mp->gids[2])); /* unused entry in the middle */
  commIbFakeGidLinkLocal(&mp->gids[3], 0x3344, COMM_IB_GID_TYPE_ROCE_V2);
  mp->gids[3].raw[0] = 0x20; /* 2001:db8::... global */
  mp->gids[3].raw[1] = 0x01;
  mp->gids[3].raw[2] = 0x0d;
  mp->gids[3].raw[3] = 0xb8;
  commIbFakeGidLinkLocal(&mp->gids[4], 0x5566, COMM_IB_GID_TYPE_ROCE_V1);
  memset(&mp->gids[5], 0, sizeof(mp->gids[5]));
  /* Only RoCE v1 entries. */
  commIbFakeDeviceInit(&d[3], "v1only", IBV_LINK_LAYER_ETHERNET, 3);
  d[3].ports[0].nGids = 3;
  d[3].ports[0].gids[1].type = COMM_IB_GID_TYPE_ROCE_V1;
  /* No address at all. */
  commIbFakeDeviceInit(&d[4], "noaddr", IBV_LINK_LAYER_ETHERNET, 4);
  d[4].ports[0].nGids = 0;
  assert_int_equal(commIbFakeConfigure(5, d), 0);

  int idx = -1;
  union ibv_gid gid;
  commIbGidType_t type;
  char buf[64];
  struct ibv_context* ctx = openByName("roce");
  assert_int_equal(commIbSelectGid(V, ctx, 1, -1, &idx, &gid, &type), commSuccess);
  assert_int_equal(idx, 3);
  assert_int_equal(type, COMM_IB_GID_TYPE_ROCE_V2);
  assert_string_equal(commIbGidStr(&gid, buf, sizeof(buf)), "::ffff:10.0.1.1");
  /* COMM_IB_GID_INDEX forces an entry as it is, even a worse one; an unused or absent one is an error. */
  assert_int_equal(commIbSelectGid(V, ctx, 1, 0, &idx, &gid, &type), commSuccess);
  assert_int_equal(idx, 0);
  assert_int_equal(type, COMM_IB_GID_TYPE_ROCE_V1);
  commLogClearLastWarn();
  assert_int_equal(commIbSelectGid(V, ctx, 1, 5, &idx, &gid, &type), commSystemError);
  assert_non_null(strstr(commLogLastWarn(), "COMM_IB_GID_INDEX"));
  assert_int_equal(commIbSelectGid(V, ctx, 1, 300, &idx, &gid, &type), commSystemError);
  assert_int_equal(commIbSelectGid(V, ctx, 2, -1, &idx, &gid, &type), commSystemError); /* no port 2 */
  assert_int_equal(V->closeDevice(ctx), 0);

  ctx = openByName("mixed");
  assert_int_equal(commIbSelectGid(V, ctx, 1, -1, &idx, &gid, &type), commSuccess);
  assert_int_equal(idx, 3);
  assert_string_equal(commIbGidStr(&gid, buf, sizeof(buf)), "2001:db8::3344");
  assert_int_equal(V->closeDevice(ctx), 0);

  ctx = openByName("v1only");
  assert_int_equal(commIbSelectGid(V, ctx, 1, -1, &idx, &gid, &type), commSuccess);
  assert_int_equal(idx, 2); /* the IPv4-mapped v1 entry */
  assert_int_equal(type, COMM_IB_GID_TYPE_ROCE_V1);
  assert_int_equal(V->closeDevice(ctx), 0);

  ctx = openByName("noaddr");
  commLogClearLastWarn();
  assert_int_equal(commIbSelectGid(V, ctx, 1, -1, &idx, &gid, &type), commSystemError);
  assert_non_null(strstr(commLogLastWarn(), "no GID"));
  assert_int_equal(V->closeDevice(ctx), 0);

  ctx = openByName("ib"); /* InfiniBand: index 0, the port GID */
  assert_int_equal(commIbSelectGid(V, ctx, 1, -1, &idx, &gid, &type), commSuccess);
  assert_int_equal(idx, 0);
  assert_int_equal(type, COMM_IB_GID_TYPE_IB);
  assert_int_equal(gid.raw[0], 0xfe);
  assert_int_equal(V->closeDevice(ctx), 0);
}

int main(void) {
  V = commIbFakeVerbs();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(testRealLoad),
      cmocka_unit_test_setup_teardown(testDiscovery, setup, teardown),
      cmocka_unit_test(testHcaFilter),
      cmocka_unit_test(testSpeed),
      cmocka_unit_test_teardown(testDiscover, teardown),
      cmocka_unit_test_teardown(testSelectGid, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif /* COMM_HAVE_IBVERBS */
