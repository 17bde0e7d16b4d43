package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/lockwatch/lockwatch/watchdog"
)

// serveHTTP serves, on addr, the watchdog's debug page at /debug/lockwatch
// ([watchdog.Watchdog.Handler]) and its counters at /metrics in
// Prometheus's text format, and prints the address it listens on to out
// (addr may have port 0). stop shuts the server down.
func serveHTTP(addr string, wd *watchdog.Watchdog, out io.Writer) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-http: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metricsHandler(wd))
	mux.Handle("/debug/lockwatch", wd.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // ends with http.ErrServerClosed
	}()
	fmt.Fprintf(out, "http: serving http://%s/metrics and http://%s/debug/lockwatch\n", ln.Addr(), ln.Addr())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			_ = srv.Close()
		}
		<-done
	}, nil
}

// metricsHandler serves the watchdog's counters ([watchdog.Watchdog.Stats])
// in Prometheus's text format, under the names
// github.com/lockwatch/lockwatch/extra/lockwatchprom gives them with the
// namespace "lockwatch": lockwatch_locks_tracked,
// lockwatch_renewals_total, lockwatch_renew_errors_total,
// lockwatch_losses_total{reason} and lockwatch_endpoint_down{endpoint}.
// The demo is part of the core module, which depends on no Prometheus
// package, so it writes them itself; an application uses lockwatchprom,
// which also has the sweep and headroom histograms.
func metricsHandler(wd *watchdog.Watchdog) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := wd.Stats()
		var b strings.Builder
		family := func(name, typ, help string) {
			fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
		}
		family("lockwatch_locks_tracked", "gauge", "Locks the registry tracks.")
		fmt.Fprintf(&b, "lockwatch_locks_tracked %d\n", st.Tracked)
		family("lockwatch_renewals_total", "counter", "Locks renewed by the watchdog.")
		fmt.Fprintf(&b, "lockwatch_renewals_total %d\n", st.Renewals)
		family("lockwatch_renew_errors_total", "counter", "Renew script calls that failed or were not answered in time; their locks are retried.")
		fmt.Fprintf(&b, "lockwatch_renew_errors_total %d\n", st.RenewErrors)
		family("lockwatch_losses_total", "counter", "Locks the watchdog gave up, by reason.")
		l := st.Losses
		for _, c := range []struct {
			reason string
			n      int64
		}{
			{watchdog.ReasonGone, l.Gone},
			{watchdog.ReasonTaken, l.Taken},
			{watchdog.ReasonUnreachable, l.Unreachable},
			{watchdog.ReasonMaxHold, l.MaxHold},
			{watchdog.ReasonQuorum, l.Quorum},
		} {
			fmt.Fprintf(&b, "lockwatch_losses_total{reason=%q} %d\n", c.reason, c.n)
		}
		family("lockwatch_endpoint_down", "gauge", "1 while the endpoint's renewals fail (the last renewal pipeline failed and none has succeeded since), else 0.")
		for _, ep := range st.Endpoints {
			down := 0
			if ep.Down {
				down = 1
			}
			fmt.Fprintf(&b, "lockwatch_endpoint_down{endpoint=\"%s\"} %d\n", labelEscaper.Replace(ep.Endpoint), down)
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = io.WriteString(w, b.String())
	})
}

// labelEscaper escapes a label value for Prometheus's text format.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
