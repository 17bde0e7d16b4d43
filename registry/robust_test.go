package registry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/registry"
)

// wrapped is an application's own client type around a go-redis client.
type wrapped struct{ *redis.Client }

func TestWatchNilWrapperIsErrNilClient(t *testing.T) {
	reg := registry.New(&setNXAdapter{name: "a"})
	var err error
	noPanic(t, "Watch(typed-nil wrapper)", func() { err = reg.Watch((*wrapped)(nil)) })
	if !errors.Is(err, registry.ErrNilClient) {
		t.Errorf("Watch((*wrapped)(nil)) = %v, want ErrNilClient", err)
	}
	if n := len(registry.Clients(reg)); n != 0 {
		t.Errorf("Clients() has %d entries after a refused Watch, want 0", n)
	}
}

func TestNewIgnoresTypedNilAdapters(t *testing.T) {
	var reg *registry.Registry
	noPanic(t, "New(typed-nil adapter)", func() { reg = registry.New((*setNXAdapter)(nil), &setNXAdapter{name: "real"}) })
	if got := registry.Adapters(reg); len(got) != 1 {
		t.Errorf("Adapters() = %v, want only the real adapter", got)
	}
}

// One adapter's panic must not keep the next adapter from tracking its lock.
func TestPanickingAdapterDoesNotBlindTheNext(t *testing.T) {
	bad := &setNXAdapter{name: "bad", boom: func() { panic("boom") }}
	good := &setNXAdapter{name: "good"}
	reg := registry.New(bad, good)
	rdb, _ := validateClient(t)
	if err := reg.Watch(rdb); err != nil {
		t.Fatal(err)
	}
	if ok, err := rdb.SetNX(context.Background(), "k", "v", time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX = %v, %v, want true, nil (a panicking adapter must not change the result)", ok, err)
	}
	l, ok := reg.Get(rdb, "k")
	if !ok || l.Source != "good" {
		t.Errorf("Get(k) = %+v, %v, want the lock tracked by the second adapter", l, ok)
	}
}
