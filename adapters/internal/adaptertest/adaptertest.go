// Package adaptertest holds the test helpers the lock adapters under
// adapters/ share: a test context, a registry watching a client of a fresh
// miniredis and the check of the locks it tracks, the source each script was
// sent with in a probe, the checks of a probe's errors, and the codec of the
// fuzz tests' inputs. Only tests import it.
package adaptertest

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/lockwatch/lockwatch/adapters/internal/adapterkit"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/redis/go-redis/v9"
)

// Context returns a context that ends after 10 seconds, or when the test
// does.
func Context(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Client returns a go-redis client of m, closed when the test ends.
func Client(t testing.TB, m *miniredis.Miniredis) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{
		Dialer: func(context.Context, string, string) (net.Conn, error) { return m.Dial() },
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Watched returns a registry with adapter a watching a client of a fresh
// miniredis, the client and the server.
func Watched(t testing.TB, a registry.Adapter) (*registry.Registry, *redis.Client, *miniredis.Miniredis) {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := Client(t, m)
	reg := registry.New(a)
	if err := reg.Watch(rdb); err != nil {
		t.Fatalf("Watch() = %v, want nil", err)
	}
	return reg, rdb, m
}

// Lock is the part of a [registry.Lock] the adapter decides.
type Lock struct {
	Key, Value, Source string
	TTL                time.Duration
}

// Tracked returns the Lock with the given key, value, source and TTL.
func Tracked(key, value, source string, ttl time.Duration) Lock {
	return Lock{Key: key, Value: value, Source: source, TTL: ttl}
}

// Locks returns what reg tracks, as Locks.
func Locks(reg *registry.Registry) []Lock {
	var out []Lock
	for _, l := range reg.Locks() {
		out = append(out, Lock{Key: l.Key, Value: l.Value, Source: l.Source, TTL: l.TTL})
	}
	return out
}

// WantLocks fails t unless reg tracks exactly the locks in want, in any
// order; step names what the test did last.
func WantLocks(t testing.TB, step string, reg *registry.Registry, want ...Lock) {
	t.Helper()
	got := Locks(reg)
	if len(got) != len(want) {
		t.Fatalf("after %s: Locks() = %+v, want %+v", step, got, want)
	}
	for _, w := range want {
		found := false
		for _, g := range got {
			found = found || g == w
		}
		if !found {
			t.Fatalf("after %s: Locks() = %+v, want %+v", step, got, want)
		}
	}
}

// RedisError is an error reply from Redis.
type RedisError string

func (e RedisError) Error() string { return string(e) }
func (RedisError) RedisError()     {}

// Sources runs probe against rec and returns the source the upstream library
// (named upstream in failures) sent with EVAL for each script, so that tests
// need not carry copies of the library's Lua. It fails t unless the probe
// succeeded and sent every script in pins with EVAL.
func Sources[S comparable](t testing.TB, upstream string, rec *adapterkit.Recorder[S], probe func(context.Context, *adapterkit.Recorder[S]) error, pins []adapterkit.Pin[S]) map[S]string {
	t.Helper()
	if err := probe(Context(t), rec); err != nil {
		t.Fatalf("probe() = %v, want nil", err)
	}
	out := make(map[S]string)
	for _, s := range rec.Seen() {
		if name, _ := s.Args[0].(string); name == "eval" {
			out[s.Script], _ = s.Args[1].(string)
		}
	}
	for _, p := range pins {
		if out[p.Script] == "" {
			t.Fatalf("%s sent no EVAL of its %v script", upstream, p.Script)
		}
	}
	return out
}

// Without returns pins minus the one with the given SHA1.
func Without[S comparable](pins []adapterkit.Pin[S], sha string) []adapterkit.Pin[S] {
	var out []adapterkit.Pin[S]
	for _, p := range pins {
		if p.SHA1 != sha {
			out = append(out, p)
		}
	}
	return out
}

// Prober is an adapter, as far as its probe goes.
type Prober interface {
	Probe(context.Context) error
}

// WantProbe fails t unless the probe of a new adapter and of the zero
// adapter succeed.
func WantProbe(t *testing.T, fromNew, zero Prober) {
	t.Helper()
	ctx := Context(t)
	if err := fromNew.Probe(ctx); err != nil {
		t.Errorf("New().Probe() = %v, want nil", err)
	}
	if err := zero.Probe(ctx); err != nil {
		t.Errorf("Adapter{}.Probe() = %v, want nil", err)
	}
}

// WantProbeCancelled fails t unless the probe of a with a cancelled context
// returns context.Canceled.
func WantProbeCancelled(t *testing.T, a Prober) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Probe(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Probe(cancelled) = %v, want context.Canceled", err)
	}
}

// WantUnpinned fails t unless err, what the probe returned without the pin
// of the script with SHA1 missing, is an *[registry.UpstreamChangedError]
// about library that names that script alone, under the use of the probe
// step that sent it.
func WantUnpinned(t *testing.T, err error, library, use, missing string) {
	t.Helper()
	if !errors.Is(err, registry.ErrUpstreamChanged) {
		t.Fatalf("Probe() without the %s pin = %v, want an error wrapping ErrUpstreamChanged", use, err)
	}
	var changed *registry.UpstreamChangedError
	if !errors.As(err, &changed) {
		t.Fatalf("Probe() without the %s pin = %T, want *registry.UpstreamChangedError", use, err)
	}
	if changed.Library != library {
		t.Errorf("UpstreamChangedError.Library = %q, want %q", changed.Library, library)
	}
	if changed.Version == "" {
		t.Errorf("UpstreamChangedError.Version = %q, want a version or (unknown)", changed.Version)
	}
	want := []registry.Script{{Use: use, SHA1: missing}}
	if !slices.Equal(changed.Scripts, want) {
		t.Errorf("UpstreamChangedError.Scripts = %v, want %v", changed.Scripts, want)
	}
	if msg := err.Error(); !strings.Contains(msg, library) || !strings.Contains(msg, missing) {
		t.Errorf("Probe().Error() = %q, want it to name %s and %s", msg, library, missing)
	}
}

// WantNoPins fails t unless err, what the probe of an adapter without pins
// returned, is an *[registry.UpstreamChangedError] naming the scripts in
// want, in that order.
func WantNoPins(t *testing.T, err error, want ...registry.Script) {
	t.Helper()
	var changed *registry.UpstreamChangedError
	if !errors.As(err, &changed) {
		t.Fatalf("Probe() with no pins = %v, want *registry.UpstreamChangedError", err)
	}
	if !slices.Equal(changed.Scripts, want) {
		t.Errorf("UpstreamChangedError.Scripts = %v, want %v", changed.Scripts, want)
	}
}
