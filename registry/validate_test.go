package registry_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/registry"
)

// This file checks the registry with bad input: nil and typed-nil clients,
// nil adapters, adapters that panic inside the hook, and calls naming
// clients the registry does not watch. Nothing may panic.

// setNXAdapter treats every successful "SET key value PX|EX n NX" as an
// obtain; when boom is set, Classify calls it first (it panics).
type setNXAdapter struct {
	name string
	boom func()
}

func (a *setNXAdapter) Name() string                { return a.name }
func (a *setNXAdapter) Probe(context.Context) error { return nil }
func (a *setNXAdapter) Classify(c registry.Command) registry.Action {
	if a.boom != nil {
		a.boom()
	}
	if c.Name != "set" || len(c.Args) != 6 || c.Err != nil {
		return registry.Action{}
	}
	key, _ := c.Args[1].(string)
	val, _ := c.Args[2].(string)
	unit := map[any]time.Duration{"px": time.Millisecond, "ex": time.Second}[c.Args[3]]
	n, _ := c.Args[4].(int64)
	if unit == 0 || n <= 0 {
		return registry.Action{}
	}
	return registry.Action{Op: registry.OpObtain, Key: key, Value: val, TTL: time.Duration(n) * unit}
}

func validateClient(t *testing.T) (*redis.Client, *miniredis.Miniredis) {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{
		Dialer: func(context.Context, string, string) (net.Conn, error) { return m.Dial() },
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb, m
}

// noPanic runs f and fails t if it panics.
func noPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("%s panicked: %v", what, p)
		}
	}()
	f()
}

func TestValidateWatchNil(t *testing.T) {
	reg := registry.New(&setNXAdapter{name: "a"})
	for _, tc := range []struct {
		name string
		c    redis.UniversalClient
	}{
		{"nil", nil},
		{"nil *redis.Client", (*redis.Client)(nil)},
		{"nil *redis.ClusterClient", (*redis.ClusterClient)(nil)},
		{"nil *redis.Ring", (*redis.Ring)(nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			noPanic(t, "Watch", func() { err = reg.Watch(tc.c) })
			if !errors.Is(err, registry.ErrNilClient) {
				t.Errorf("Watch(%s) = %v, want ErrNilClient", tc.name, err)
			}
		})
	}
	if got := registry.Clients(reg); len(got) != 0 {
		t.Errorf("Clients() after refused Watches = %v, want none", got)
	}
}

func TestValidateNewNilAdapters(t *testing.T) {
	a := &setNXAdapter{name: "a"}
	for _, tc := range []struct {
		name     string
		adapters []registry.Adapter
		want     int
	}{
		{"none", nil, 0},
		{"one nil", []registry.Adapter{nil}, 0},
		{"nils around one", []registry.Adapter{nil, a, nil}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var reg *registry.Registry
			noPanic(t, "New", func() { reg = registry.New(tc.adapters...) })
			if got := len(registry.Adapters(reg)); got != tc.want {
				t.Fatalf("len(New(%s).Adapters()) = %d, want %d", tc.name, got, tc.want)
			}
			// The registry works: a registry without adapters tracks nothing.
			rdb, m := validateClient(t)
			if err := reg.Watch(rdb); err != nil {
				t.Fatalf("Watch = %v", err)
			}
			ok, err := rdb.SetNX(context.Background(), "k", "v", time.Second).Result()
			if err != nil || !ok {
				t.Fatalf("SET NX through the registry's hook = %v, %v, want true, nil", ok, err)
			}
			if got := reg.Len(); got != tc.want {
				t.Errorf("Len() = %d, want %d", got, tc.want)
			}
			if v, _ := m.Get("k"); v != "v" {
				t.Errorf("GET k = %q, want v", v)
			}
			_ = reg.String()
		})
	}
}

// A panicking adapter, whatever it panics with and wherever the command
// runs (alone or in a pipeline), changes neither the command's result nor
// its error, and the registry keeps working afterwards.
func TestValidatePanickingAdapter(t *testing.T) {
	for _, tc := range []struct {
		name string
		boom func()
	}{
		{"string", func() { panic("adapter broke") }},
		{"error", func() { panic(errors.New("adapter broke")) }},
		{"nil", func() { panic(nil) }},
		{"runtime error", func() {
			var m map[string]int
			//lint:ignore SA5000 the runtime error is the panic this case needs
			m["x"] = 1
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := &setNXAdapter{name: "bad", boom: tc.boom}
			reg := registry.New(bad)
			rdb, m := validateClient(t)
			if err := reg.Watch(rdb); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			var (
				ok  bool
				err error
			)
			noPanic(t, "SET NX through a panicking adapter", func() { ok, err = rdb.SetNX(ctx, "alone", "v1", time.Second).Result() })
			if err != nil || !ok {
				t.Errorf("SET NX = %v, %v, want true, nil", ok, err)
			}
			noPanic(t, "SET NX on a taken key through a panicking adapter", func() { ok, err = rdb.SetNX(ctx, "alone", "v2", time.Second).Result() })
			if err != nil || ok {
				t.Errorf("SET NX of a taken key = %v, %v, want false, nil", ok, err)
			}
			var cmds []redis.Cmder
			noPanic(t, "a pipeline through a panicking adapter", func() {
				cmds, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
					p.SetNX(ctx, "piped", "v3", time.Second)
					p.Eval(ctx, "return 7", nil)
					p.Get(ctx, "alone")
					return nil
				})
			})
			if err != nil || len(cmds) != 3 {
				t.Fatalf("pipeline = %v, %v, want 3 commands, nil", cmds, err)
			}
			if ok, err := cmds[0].(*redis.BoolCmd).Result(); !ok || err != nil {
				t.Errorf("piped SET NX = %v, %v, want true, nil", ok, err)
			}
			if v, err := cmds[1].(*redis.Cmd).Result(); v != int64(7) || err != nil {
				t.Errorf("piped EVAL = %v, %v, want 7, nil", v, err)
			}
			if v, err := cmds[2].(*redis.StringCmd).Result(); v != "v1" || err != nil {
				t.Errorf("piped GET = %q, %v, want v1, nil", v, err)
			}
			if n := reg.Len(); n != 0 {
				t.Errorf("Len() = %d, want 0", n)
			}
			// Once the adapter behaves, the registry tracks again.
			bad.boom = nil
			if ok, err := rdb.SetNX(ctx, "later", "v4", time.Second).Result(); !ok || err != nil {
				t.Fatalf("SET NX = %v, %v", ok, err)
			}
			if _, tracked := reg.Get(rdb, "later"); !tracked {
				t.Errorf("lock obtained after the adapter stopped panicking is not tracked")
			}
			if v, _ := m.Get("piped"); v != "v3" {
				t.Errorf("GET piped = %q, want v3", v)
			}
		})
	}
}

// The registry's methods that name a client accept a nil client and a
// client they do not watch: they find nothing and panic nowhere.
func TestValidateUnknownClients(t *testing.T) {
	reg := registry.New(&setNXAdapter{name: "a"})
	watched, _ := validateClient(t)
	if err := reg.Watch(watched); err != nil {
		t.Fatal(err)
	}
	if ok, err := watched.SetNX(context.Background(), "k", "v", time.Minute).Result(); !ok || err != nil {
		t.Fatalf("SET NX = %v, %v", ok, err)
	}
	stranger, _ := validateClient(t)
	for _, tc := range []struct {
		name string
		c    redis.UniversalClient
	}{
		{"nil", nil},
		{"nil *redis.Client", (*redis.Client)(nil)},
		{"not watched", stranger},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noPanic(t, "Get", func() {
				if _, ok := reg.Get(tc.c, "k"); ok {
					t.Errorf("Get(%s, k) found a lock", tc.name)
				}
			})
		})
	}
	// The watched client's lock is untouched by all of that.
	if _, ok := reg.Get(watched, "k"); !ok || reg.Len() != 1 {
		t.Errorf("after calls naming other clients: Get(watched, k) = %v, Len() = %d, want the lock tracked", ok, reg.Len())
	}
	noPanic(t, "Get with unknown keys", func() {
		for _, k := range []string{"nokey", ""} {
			if _, ok := reg.Get(watched, k); ok {
				t.Errorf("Get(watched, %q) found a lock", k)
			}
		}
	})
	// Subscribe with a nil function, and cancelling twice.
	noPanic(t, "Subscribe(nil)", func() {
		cancel := reg.Subscribe(nil)
		cancel()
		cancel()
	})
}
