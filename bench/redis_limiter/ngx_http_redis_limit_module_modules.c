/* BENCHMARK BASELINE ONLY -- not part of grl.
 * The arrays nginx's dlopen() looks for in a dynamic module (what nginx's own
 * build generates as <module>_modules.c). Kept in C; exported by exports.map. */
#include <ngx_config.h>
#include <ngx_core.h>

extern ngx_module_t ngx_http_redis_limit_module;

#pragma GCC visibility push(default)
ngx_module_t* ngx_modules[] = {&ngx_http_redis_limit_module, NULL};

char* ngx_module_names[] = {"ngx_http_redis_limit_module", NULL};

char* ngx_module_order[] = {NULL};
#pragma GCC visibility pop
