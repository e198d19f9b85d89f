package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/fencelock/fencelock/backend"
)

// metricsAddrFlag adds --metrics-addr to fs.
func metricsAddrFlag(fs *flag.FlagSet) *string {
	return fs.String("metrics-addr", "", "serve the lock's metrics in the Prometheus text format at http://HOST:PORT/metrics; none if empty")
}

// checkMetricsAddr reports why addr is no HOST:PORT to listen on.
func checkMetricsAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--metrics-addr %q: %w", addr, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || (n == 0 && port != "0") {
		return fmt.Errorf("--metrics-addr %q: the port must be a number from 0 to 65535", addr)
	}
	return nil
}

// metricsServer serves a Locker's metrics at /metrics, through the
// OpenTelemetry Prometheus exporter.
type metricsServer struct {
	provider *sdkmetric.MeterProvider
	server   *http.Server
	done     chan struct{}
}

// serveMetrics listens on addr (checked by checkMetricsAddr) and serves
// there the metrics of the provider it returns, which the Locker is to be
// opened with (option). A nil server, with no option and no error, when
// addr is "".
func serveMetrics(addr string) (*metricsServer, []backend.Option, error) {
	if addr == "" {
		return nil, nil, nil
	}
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	m := &metricsServer{
		provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter)),
		server:   &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		done:     make(chan struct{}),
	}
	go func() {
		defer close(m.done)
		_ = m.server.Serve(ln)
	}()
	return m, []backend.Option{backend.WithMeterProvider(m.provider)}, nil
}

// close stops serving; nil does nothing.
func (m *metricsServer) close() {
	if m == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := m.server.Shutdown(ctx); errors.Is(err, context.DeadlineExceeded) {
		_ = m.server.Close()
	}
	<-m.done
	_ = m.provider.Shutdown(ctx)
}
