/* Which collnet plugin a process uses, loaded once and shared by its communicators (collnet_internal.h).
 *  - COMM_AGGD=host:port,... : the aggregation service's plugin (an NCCL-ABI CollNet library,
 *    libcomm-collnet-aggd.so: COMM_AGGD_PLUGIN names another path);
 *  - else COMM_COLLNET_PLUGIN, else, as NCCL finds SHARP's, the network plugin's library: COMM_NET_PLUGIN's
 *    (NCCL_NET_PLUGIN's) comma list, or NCCL's default libnccl-net.so when unset ("none": no library);
 * each a library exporting libcomm's commCollNetPlugin_v1, or NCCL's ncclCollNetPlugin_v11 .. _v8 (through
 * transports/collnet/nccl/). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
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

/* The CollNet table of an opened library: libcomm's commCollNetPlugin_v1, else NCCL's through the adapter; NULL
 * (the library closed) with the reason in why. */
static const commCollNet_t* cnResolve(void* handle, const char* source, char* why, size_t whyLen) {
  const commCollNet_t* plugin = (const commCollNet_t*)dlsym(handle, COMM_COLLNET_PLUGIN_SYMBOL);
  if (plugin && plugin->version != COMM_COLLNET_PLUGIN_VERSION) {
    snprintf(why, whyLen, "%s exports %s with version %d, expected %d", source, COMM_COLLNET_PLUGIN_SYMBOL,
             plugin->version, COMM_COLLNET_PLUGIN_VERSION);
    plugin = NULL;
  } else if (!plugin) {
    plugin = commCollNetNcclWrap(handle, source);
    if (!plugin)
      snprintf(why, whyLen, "%s exports no CollNet plugin (%s, or NCCL's ncclCollNetPlugin_v11..v8)", source,
               COMM_COLLNET_PLUGIN_SYMBOL);
  }
  if (!plugin) dlclose(handle);
  return plugin;
}

/* NCCL's own lookup of a CollNet: in the network plugin's library, COMM_NET_PLUGIN's (NCCL_NET_PLUGIN's) comma
 * list item by item, or NCCL's default libnccl-net.so when it is unset (where SHARP's plugin installs itself);
 * "none" names no library. */
static const commCollNet_t* cnFromNetLibrary(void** handleOut, char* why, size_t whyLen) {
  const char* name = commParamStr("COMM_NET_PLUGIN", NULL);
  const char* what = name ? commParamSource("COMM_NET_PLUGIN") : "the default NCCL network plugin";
  const char* list = name ? name : "libnccl-net.so";
  snprintf(why, whyLen,
           "no collnet plugin: set COMM_AGGD (software aggregation) or COMM_COLLNET_PLUGIN / COMM_NET_PLUGIN to a "
           "library with a CollNet plugin%s",
           name ? "" : " (no libnccl-net.so on the library path either)");
  if (name && (strcasecmp(name, "none") == 0 || strcasecmp(name, "socket") == 0)) return NULL;
  for (const char* s = list; *s;) {
    size_t n = strcspn(s, ",");
    char item[256], loadWhy[600] = "";
    snprintf(item, sizeof(item), "%.*s", (int)n, s);
    s += n + (s[n] == ',');
    if (!item[0]) continue;
    snprintf(cn.source, sizeof(cn.source), "%s%s%.200s", what, name ? "=" : " ", item);
    void* handle = commNetPluginOpen(item, loadWhy, sizeof(loadWhy));
    if (!handle) {
      if (name) snprintf(why, whyLen, "%s=%s cannot be loaded: %s", what, item, loadWhy);
      continue;
    }
    const commCollNet_t* plugin = cnResolve(handle, cn.source, why, whyLen);
    if (plugin) {
      *handleOut = handle;
      return plugin;
    }
  }
  return NULL;
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
  char path[300] = "", loadWhy[600] = "";
  void* handle = NULL;
  const commCollNet_t* plugin = NULL;
  if (aggd && *aggd) {
    handle = openAggdPlugin(path, sizeof(path), loadWhy, sizeof(loadWhy));
    snprintf(cn.source, sizeof(cn.source), "COMM_AGGD=%.120s (%.160s)", aggd, path);
    if (!handle) snprintf(why, whyLen, "COMM_AGGD is set but its plugin %s cannot be loaded: %s", path, loadWhy);
    else plugin = cnResolve(handle, cn.source, why, whyLen);
  } else if (name && *name) {
    handle = commNetPluginOpen(name, loadWhy, sizeof(loadWhy));
    snprintf(cn.source, sizeof(cn.source), "COMM_COLLNET_PLUGIN=%.260s", name);
    if (!handle) snprintf(why, whyLen, "COMM_COLLNET_PLUGIN=%s cannot be loaded: %s", name, loadWhy);
    else plugin = cnResolve(handle, cn.source, why, whyLen);
  } else {
    plugin = cnFromNetLibrary(&handle, why, whyLen);
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
