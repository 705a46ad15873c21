// `location = /grl { grl_status; }`: the shm as JSON (default) or as
// Prometheus text (`?format=prometheus`).

#include "grl_module.h"

namespace grl::ngx {

ngx_int_t status_handler(ngx_http_request_t* r) noexcept {
    if (!(r->method & (NGX_HTTP_GET | NGX_HTTP_HEAD))) return NGX_HTTP_NOT_ALLOWED;
    ngx_int_t rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) return rc;
    auto* m = static_cast<MainConf*>(ngx_http_get_module_main_conf(r, ngx_http_grl_module));
    if (m->shm_base == nullptr) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0, "grl_status: no \"grl_zone\" configured");
        return NGX_HTTP_NOT_FOUND;
    }
    ngx_str_t fmt = ngx_null_string;
    bool prom = ngx_http_arg(r, reinterpret_cast<u_char*>(const_cast<char*>("format")), 6, &fmt) ==
                    NGX_OK &&
                fmt.len == 10 && ngx_strncmp(fmt.data, "prometheus", 10) == 0;
    std::string body;
    try {
        StatusInput in;
        shm::View shm(m->shm_base);
        in.shm = &shm;
        in.table = &m->cpp->table;
        in.id = m->cpp->id;
        in.shm_name = to_std(m->shm_name);
        in.now_ms = ngx_current_msec;
        in.ttl_ms = m->instruction_ttl;
        in.reporting = !m->cpp->collector_endpoint.empty();
        in.curve = m->cpp->curve();
        body = prom ? render_status_prometheus(in) : render_status_json(in);
    } catch (const std::exception& e) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0, "grl_status: %s", e.what());
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }
    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = static_cast<off_t>(body.size());
    if (prom) {
        ngx_str_set(&r->headers_out.content_type, "text/plain; version=0.0.4");
    } else {
        ngx_str_set(&r->headers_out.content_type, "application/json");
    }
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    rc = ngx_http_send_header(r);
    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) return rc;
    ngx_buf_t* b = ngx_create_temp_buf(r->pool, body.size());
    if (b == nullptr) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    b->last = ngx_cpymem(b->pos, body.data(), body.size());
    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;
    ngx_chain_t out = {b, nullptr};
    return ngx_http_output_filter(r, &out);
}

}  // namespace grl::ngx
