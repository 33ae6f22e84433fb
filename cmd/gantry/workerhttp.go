package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gantry-build/gantry/internal/config"
	"github.com/gantry-build/gantry/internal/server"
	"github.com/gantry-build/gantry/internal/worker"
	"github.com/gantry-build/gantry/internal/worker/persistent"
)

// serveWorkerHTTP serves a standalone worker's /metrics, /healthz and
// /status/persistent-workers (its persistent worker pool, by key) on
// addr until the returned stop is called; bound is the address bound.
//
// The port is secured as `gantry serve` secures its own, from the same
// sections of the worker's --config: TLS with tls.cert_file and key_file
// (client certificates per tls.client_ca_file), and with auth.enabled
// every path but /healthz needs an identity with the status permission
// (auth.tokens_file, auth.jwt, client certificates, auth.policy) unless
// auth.http_require_token: false opts out, which is logged as a warning.
// A token requirement without TLS is refused unless addr is loopback: the
// token would cross the network in plain text.
func serveWorkerHTTP(addr string, cfg config.Config, w *worker.Worker, log *slog.Logger) (bound string, stop func(), err error) {
	sec, err := server.NewHTTPPortSecurity(cfg)
	if err != nil {
		return "", nil, fmt.Errorf("worker HTTP port: %w", err)
	}
	if sec.RequireToken() && !sec.TLS() && !isLoopbackAddr(addr) {
		return "", nil, fmt.Errorf("worker HTTP port: with auth.enabled it requires a token, which would cross the network in plain text on %s without TLS; set tls.cert_file and tls.key_file in --config, give --http-listen a loopback address, or (not recommended) leave the port open to anyone who reaches it with auth.http_require_token: false", addr)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := w.RegisterMetrics(reg, true); err != nil {
		return "", nil, err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("listen (HTTP) on %s: %w; pick a free address with --http-listen, or leave it empty", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "text/plain")
		fmt.Fprintln(rw, "ok")
	})
	mux.HandleFunc("/status/persistent-workers", func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
		persistent.WriteStats(rw, w.PersistentStats())
	})
	srv := &http.Server{Handler: sec.Handler(mux), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(log.With("component", "http").Handler(), slog.LevelWarn)}
	go func() {
		if err := srv.Serve(sec.Listener(lis)); !errors.Is(err, http.ErrServerClosed) {
			log.Error("worker HTTP port stopped", "addr", addr, "err", err)
		}
	}()
	log.Info("worker metrics", "http", lis.Addr().String(), "tls", sec.TLS(), "require_token", sec.RequireToken())
	switch {
	case sec.OptedOut():
		log.Warn("auth is enabled but auth.http_require_token: false leaves the worker's HTTP port open to anyone who reaches it (/metrics); remove the key to require credentials there", "http", lis.Addr().String())
	case !sec.RequireToken() && !isLoopbackAddr(addr):
		log.Warn("the worker's HTTP port is open to anyone who can reach it (/metrics); keep --http-listen on loopback or a management network, or turn auth.enabled on in --config", "http", lis.Addr().String())
	}
	return lis.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}, nil
}

// isLoopbackAddr reports whether a listen address binds only loopback
// ("localhost", 127.0.0.0/8, ::1); a missing host means every interface.
func isLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
