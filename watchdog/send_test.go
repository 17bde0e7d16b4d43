package watchdog

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/registry"
)

// When go-redis gets no connection at all it returns the error from Exec
// and leaves the commands untouched: the renewal must fail with that error,
// not with a confusing reply-type error, and every lock must be retried.
func TestSendReportsExecErrorWhenNoConnection(t *testing.T) {
	refused := errors.New("dial refused by test")
	c := redis.NewClient(&redis.Options{
		Addr:       "127.0.0.1:1",
		Dialer:     func(context.Context, string, string) (net.Conn, error) { return nil, refused },
		MaxRetries: -1,
	})
	defer c.Close()
	w := &Watchdog{o: defaultOptions()}
	refs := []registry.Ref{{Key: "a", Value: "v", TTL: time.Second}, {Key: "b", Value: "v", TTL: time.Second}}
	out := w.send(context.Background(), c, splitChunks(refs, 1, false), time.Second)
	if len(out.failed) != 2 || len(out.renewed)+len(out.gone)+len(out.taken) != 0 {
		t.Fatalf("send() = %d failed, %d renewed, %d gone, %d taken, want 2 failed only",
			len(out.failed), len(out.renewed), len(out.gone), len(out.taken))
	}
	if !errors.Is(out.err, refused) || strings.Contains(out.err.Error(), "unexpected type") {
		t.Errorf("send() error = %v, want it to wrap %v", out.err, refused)
	}
	if got := w.failures.Load(); got != 2 {
		t.Errorf("failures = %d, want 2 (one per chunk)", got)
	}
}
