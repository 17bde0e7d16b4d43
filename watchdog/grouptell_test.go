package watchdog

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-redsync/redsync/v4"

	"github.com/lockwatch/lockwatch/adapters/goredsync"
	"github.com/lockwatch/lockwatch/internal/table"
	"github.com/lockwatch/lockwatch/registry"
)

// A Redlock mutex whose quorum is no longer confirmed in time is told
// once, and counted once in Stats().Unconfirmed, when two of its copies'
// tellers find it due at the same moment: each lane marks its own copy
// told and then judges the whole lock (a look on asking and a scheduler
// may do the same). Here every server fails, the schedulers are held back
// past the tell times, and two copies are told as their lanes would, one
// after the other, both marked before either judged. Seen failing before
// the lock's tellers took turns: Unconfirmed 2 for one lock.
func TestRedlockToldOnceByTwoCopies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		defer SetPassDelay(10 * time.Second)() // no scheduler tells it
		reg := registry.New(goredsync.New())
		pools, ms := RedlockServers(t, reg, 3)
		w, err := Attach(reg)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		const ttl = 600 * time.Millisecond
		mutex := redsync.New(pools...).NewMutex("group", redsync.WithExpiry(ttl), redsync.WithTries(1))
		if err := mutex.Lock(); err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			m.SetError("LOADING Redis is loading the dataset in memory")
		}
		time.Sleep(ttl) // every copy past its tell time, none told
		synctest.Wait()

		type held struct {
			t *table.Table
			e *table.Entry
		}
		var copies []held
		for _, tb := range w.set.Tables() {
			tb.Lock()
			if e := tb.GetLocked("group"); e != nil {
				copies = append(copies, held{tb, e})
			}
			tb.Unlock()
		}
		if len(copies) != 3 {
			t.Fatalf("tracked copies %d, want 3", len(copies))
		}
		if g := w.set.GroupOf(copies[0].e); g == nil {
			t.Fatal("the copies are not grouped")
		}
		if n := w.unconfirmed.Load(); n != 0 {
			t.Fatalf("Unconfirmed %d before the tellers, want 0: the scenario did not happen", n)
		}
		for _, c := range copies[:2] { // each lane marks its own copy first
			c.t.Lock()
			if !c.t.TellLocked(c.e) {
				t.Fatalf("copy on %v already told", c.t.Client)
			}
			c.t.Unlock()
		}
		for _, c := range copies[:2] {
			w.tellUnconfirmedOn(c.t, "endpoint", 0, []*table.Entry{c.e}, nil, nil)
		}
		if n := w.unconfirmed.Load(); n != 1 {
			t.Errorf("Unconfirmed %d after two copies' tellers judged one lock, want 1", n)
		}
		for _, c := range copies {
			c.t.Lock()
			told := c.t.ToldLocked(c.e)
			c.t.Unlock()
			if !told {
				t.Errorf("a copy on %v not marked told, want every copy told with the lock", c.t.Client)
			}
		}
		for _, m := range ms {
			m.SetError("")
		}
		_, _ = mutex.Unlock()
	})
}
