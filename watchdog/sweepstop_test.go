package watchdog

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/redis/go-redis/v9"
)

// A sweep asked of a watchdog whose lanes have ended (Sweep checks that
// Stop has not begun, then asks every endpoint; Stop may come between)
// must still end: a request appended to a lane whose sweeper has gone is
// never finished, and Sweep's goroutine waiting for it leaked (goleak,
// CI run 114, with the newest Go and releases).
func TestSweepAskedAfterLanesEndedEnds(t *testing.T) {
	m := miniredis.RunT(t)
	reg := registry.New(nxAdapter{})
	w, err := Attach(reg, WithSchedule("@every 1h"))
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer c.Close()
	if err := reg.Watch(c); err != nil {
		t.Fatal(err)
	}
	if !c.SetNX(context.Background(), "sweep:stop", "v", time.Minute).Val() {
		t.Fatal("SET NX failed")
	}
	if err := w.Sweep(context.Background()); err != nil { // the lane exists
		t.Fatal(err)
	}
	clients := w.clientList()
	w.Stop()
	r := &request{}
	for _, cl := range clients {
		cl.ask(r) // as Sweep's askAll does when Stop came after its check
	}
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a sweep asked after the lanes ended was never finished")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) == 0 {
		t.Error("a sweep asked after Stop ended without an error, want ErrStopped")
	}
}
