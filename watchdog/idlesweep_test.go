package watchdog

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/memconn"
	"github.com/lockwatch/lockwatch/registry"
)

// A lane whose scheduler last looked while a sweep was asked for or ran
// (not idle then) still gives itself back once the sweep is done: the end
// of a sweep starts a pass. Before, nothing woke the scheduler after a
// sweep of an empty table, and a client with no lock kept its lanes, its
// goroutines and its place in Stats for good (by hand, TestTenantsComeAndGo
// beside three -race test binaries and two CPU burners: 1 to 5 of 400
// closed tenants' endpoints still listed after 20 s, three sweeps each).
func TestLaneRetiresAfterASweepItWasBusyWith(t *testing.T) {
	Bubble(t, func(t *testing.T) {
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true)
		t.Cleanup(m.Close)
		reg := registry.New(nxAdapter{})
		w, err := Attach(reg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		c := redis.NewClient(&redis.Options{Addr: memconn.Addr, Dialer: memconn.Dialer(m)})
		t.Cleanup(func() { _ = c.Close() })
		if err := reg.Watch(c); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if !c.SetNX(ctx, "k", "v", 300*time.Millisecond).Val() {
			t.Fatal("SET k NX failed")
		}
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		cl := (*w.view.Load())[w.set.Tables()[0]]
		if cl == nil {
			t.Fatal("no client made for the watched client with a lock")
		}
		l := cl.single
		// The lock ends; a tick asks for a sweep, and the scheduler runs
		// before the sweeper has taken the request: the lane is not idle
		// then. The sweep follows.
		c.Del(ctx, "k")
		time.Sleep(time.Second) // the renewal finds it gone: no lock left
		synctest.Wait()
		l.mu.Lock()
		l.wantSweep = true
		l.mu.Unlock()
		l.kickDue()
		synctest.Wait()
		kick(l.sweepKick)
		synctest.Wait()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if st := w.Stats(); len(st.Endpoints) != 0 {
			t.Errorf("Stats().Endpoints = %+v 5 s after the last lock ended and a sweep, want none", st.Endpoints)
		}
	})
}
