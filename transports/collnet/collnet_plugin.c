/* Which collnet plugin a process uses, loaded once and shared by its communicators (collnet_internal.h).
 *  - COMM_AGGD=host:port,... : the aggregation service's plugin (an NCCL-ABI CollNet library,
 *    libcomm-collnet-aggd.so: COMM_AGGD_PLUGIN names another path);
 *  - else COMM_COLLNET_PLUGIN, else COMM_NET_PLUGIN (or NCCL_NET_PLUGIN): a library exporting libcomm's
 *    commCollNetPlugin_v1, or NCCL's ncclCollNetPlugin_v11 .. _v8 (through transports/collnet/nccl/). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "collnet_internal.h"
#include "debug.h"
#include "nccl/collnet_nccl.h"
#include "param.h"

static pthread_mutex_t cnLock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  void* handle;
  const commCollNet_t* plugin;
  int refs;
  char source[300];
} cn;

/* The aggregation service's plugin: next to libcomm (the directory this library was loaded from), else by the
 * loader's search path. */
static void* openAggdPlugin(char* path, size_t pathLen, char* why, size_t whyLen) {
  const char* forced = commParamStr("COMM_AGGD_PLUGIN", NULL);
  if (forced && *forced) {
    snprintf(path, pathLen, "%s", forced);
    return commNetPluginOpen(forced, why, whyLen);
  }
  Dl_info info;
  if (dladdr((void*)openAggdPlugin, &info) && info.dli_fname && strchr(info.dli_fname, '/')) {
    const char* slash = strrchr(info.dli_fname, '/');
    snprintf(path, pathLen, "%.*s/libcomm-collnet-aggd.so", (int)(slash - info.dli_fname), info.dli_fname);
    void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
  }
  snprintf(path, pathLen, "libcomm-collnet-aggd.so");
  return commNetPluginOpen(path, why, whyLen);
}

const commCollNet_t* commCollNetAcquire(char* why, size_t whyLen, char* source, size_t sourceLen) {
  pthread_mutex_lock(&cnLock);
  if (cn.refs > 0) {
    cn.refs++;
    snprintf(source, sourceLen, "%s", cn.source);
    const commCollNet_t* p = cn.plugin;
    pthread_mutex_unlock(&cnLock);
    return p;
  }
  const char* aggd = commParamStr("COMM_AGGD", NULL);
  const char* name = commParamStr("COMM_COLLNET_PLUGIN", NULL);
  const char* what = "COMM_COLLNET_PLUGIN";
  if (!name || !*name) {
    name = commParamStr("COMM_NET_PLUGIN", NULL); /* or NCCL_NET_PLUGIN (param.c) */
    what = name ? commParamSource("COMM_NET_PLUGIN") : "COMM_NET_PLUGIN";
  }
  char path[300] = "", loadWhy[600] = "";
  void* handle = NULL;
  if (aggd && *aggd) {
    handle = openAggdPlugin(path, sizeof(path), loadWhy, sizeof(loadWhy));
    snprintf(cn.source, sizeof(cn.source), "COMM_AGGD=%.120s (%.160s)", aggd, path);
    if (!handle) snprintf(why, whyLen, "COMM_AGGD is set but its plugin %s cannot be loaded: %s", path, loadWhy);
  } else if (name && *name && strcmp(name, "none") != 0) {
    handle = commNetPluginOpen(name, loadWhy, sizeof(loadWhy));
    snprintf(cn.source, sizeof(cn.source), "%s=%.260s", what, name);
    if (!handle) snprintf(why, whyLen, "%s=%s cannot be loaded: %s", what, name, loadWhy);
  } else {
    snprintf(why, whyLen,
             "no collnet plugin: set COMM_AGGD (software aggregation) or COMM_COLLNET_PLUGIN / "
             "COMM_NET_PLUGIN to a library with a CollNet plugin");
  }
  const commCollNet_t* plugin = NULL;
  if (handle) {
    plugin = (const commCollNet_t*)dlsym(handle, COMM_COLLNET_PLUGIN_SYMBOL);
    if (plugin && plugin->version != COMM_COLLNET_PLUGIN_VERSION) {
      snprintf(why, whyLen, "%s exports %s with version %d, expected %d", cn.source, COMM_COLLNET_PLUGIN_SYMBOL,
               plugin->version, COMM_COLLNET_PLUGIN_VERSION);
      plugin = NULL;
    } else if (!plugin) {
      plugin = commCollNetNcclWrap(handle, cn.source);
      if (!plugin)
        snprintf(why, whyLen, "%s exports no CollNet plugin (%s, or NCCL's ncclCollNetPlugin_v11..v8)", cn.source,
                 COMM_COLLNET_PLUGIN_SYMBOL);
    }
    if (!plugin) dlclose(handle);
  }
  if (plugin) {
    cn.handle = handle;
    cn.plugin = plugin;
    cn.refs = 1;
    snprintf(source, sourceLen, "%s", cn.source);
  }
  pthread_mutex_unlock(&cnLock);
  return plugin;
}

void commCollNetRelease(void) {
  pthread_mutex_lock(&cnLock);
  if (cn.refs > 0 && --cn.refs == 0) {
    /* The library stays loaded: a plugin's threads or atexit handlers may still run its code. */
    cn.plugin = NULL;
    cn.handle = NULL;
  }
  pthread_mutex_unlock(&cnLock);
}
