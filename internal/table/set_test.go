package table

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
)

// wrapped is a client of a type of its own, as an application's wrapper
// around a go-redis client would be.
type wrapped struct{ *redis.Client }

// gcUntil runs the GC until done reports true (the set's cleanups run
// after a GC, on a goroutine of their own) or two seconds have passed.
func gcUntil(done func() bool) bool {
	deadline := time.Now().Add(2 * time.Second)
	for {
		runtime.GC()
		if done() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// members returns how many members the set lists, by its map, its other
// clients and its order (those gone but not compacted away excluded).
func members(s *Set) (clients, others, order int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.clients), len(s.others), len(s.order) - s.gone
}

// The set holds its tables weakly while they track no lock: a table (and
// its client) nothing else refers to is collected and leaves the set, its
// map, its list and the groups of recent acquires. A table that tracks a
// lock is kept, whether anything else refers to it or not, until the lock
// is released.
func TestSetHoldsIdleTablesWeakly(t *testing.T) {
	s := NewSet([]string{"a"}, nil)
	kept := redis.NewClient(&redis.Options{})
	defer kept.Close()
	keptTab, _ := s.Add(kept)

	var tables []weak.Pointer[Table]
	var clients []weak.Pointer[redis.Client]
	func() {
		for i := range 100 {
			var c redis.UniversalClient = redis.NewClient(&redis.Options{})
			if i%10 == 0 {
				c = &wrapped{redis.NewClient(&redis.Options{})} // no weak key: found by comparison
			}
			tab, added := s.Add(c)
			if again, addedAgain := s.Add(c); !added || again != tab || addedAgain || s.Lookup(c) != tab {
				t.Fatalf("Add twice = %p, %v and %p, %v; Lookup %p: want one table", tab, added, again, addedAgain, s.Lookup(c))
			}
			key := fmt.Sprint("k", i)
			obtain(tab, key, "v", time.Second)
			if i%2 == 0 {
				// A lock over two servers: an attempt on the kept
				// client's table, then the obtain here, make a group
				// that the acquire keeps for a while.
				keptTab.Apply(Change{Op: OpAttempt, Key: key, Value: "v"}, time.Now())
				obtain(tab, key, "v", time.Second)
			}
			tab.Apply(Change{Op: OpRelease, Key: key, Value: "v"}, time.Now())
			tables = append(tables, weak.Make(tab))
			if w, ok := c.(*wrapped); ok {
				clients = append(clients, weak.Make(w.Client))
			} else {
				clients = append(clients, weak.Make(c.(*redis.Client)))
			}
			_ = c.Close()
		}
	}()
	s.g.mu.Lock()
	acquires := len(s.g.acquires)
	s.g.mu.Unlock()
	if acquires == 0 {
		t.Fatal("no acquire recorded: the test does not check that recent acquires keep no table")
	}
	// One table tracks a lock, and nothing but the set refers to it.
	var held weak.Pointer[Table]
	func() {
		tab, _ := s.Add(redis.NewClient(&redis.Options{}))
		obtain(tab, "held", "v", time.Second)
		held = weak.Make(tab)
	}()

	ok := gcUntil(func() bool {
		n, o, order := members(s)
		return n == 2 && o == 0 && order == 2
	})
	n, o, order := members(s)
	alive := 0
	for i := range tables {
		if tables[i].Value() != nil || clients[i].Value() != nil {
			alive++
		}
	}
	if !ok || alive != 0 {
		t.Errorf("after the GC: %d of 100 dropped tables or clients alive; the set's map has %d, others %d, order %d members; want 2, 0, 2", alive, n, o, order)
	}
	if got := s.Tables(); len(got) != 2 || got[0] != keptTab || got[1] != held.Value() {
		t.Errorf("Tables() = %v, want the kept table and the one tracking a lock, in that order", got)
	}
	if got := s.Holding(); len(got) != 1 || got[0] != held.Value() {
		t.Errorf("Holding() = %v, want the table tracking a lock", got)
	}
	if !s.AnyHolding() {
		t.Error("AnyHolding() = false while a table tracks a lock, want true")
	}
	if s.watched() != 2 {
		t.Errorf("watched() = %d, want 2", s.watched())
	}

	// Its lock released, the table tracking it goes too.
	tab := held.Value()
	if tab == nil {
		t.Fatal("a table tracking a lock was collected")
	}
	if _, tracked := tab.Apply(Change{Op: OpRelease, Key: "held", Value: "v"}, time.Now()); tracked || tab.Len() != 0 {
		t.Fatal("release of the held lock did not untrack it")
	}
	_ = tab.Client.Close()
	tab = nil
	if !gcUntil(func() bool { return held.Value() == nil && len(s.Tables()) == 1 }) {
		t.Errorf("a table whose last lock was released was not collected: %d tables", len(s.Tables()))
	}
	if got := s.Lookup(kept); got != keptTab {
		t.Errorf("Lookup(kept) = %p, want %p", got, keptTab)
	}
	if s.AnyHolding() {
		t.Errorf("AnyHolding() = true with no lock tracked (Holding() = %v), want false", s.Holding())
	}
	runtime.KeepAlive(keptTab)
}

// Remove lets a table go even while it tracks locks (it records nothing
// more), and a table of a client the set no longer lists is made anew.
func TestSetRemoveLetsGo(t *testing.T) {
	s := NewSet([]string{"a"}, nil)
	var w weak.Pointer[Table]
	c := redis.NewClient(&redis.Options{})
	defer c.Close()
	func() {
		tab, _ := s.Add(c)
		obtain(tab, "k", "v", time.Second)
		s.Remove(tab)
		if tab.m.pin.Load() != nil || len(s.Tables()) != 0 || s.Lookup(c) != nil {
			t.Fatal("a removed table is still kept or listed")
		}
		w = weak.Make(tab)
	}()
	if !gcUntil(func() bool { return w.Value() == nil }) {
		t.Error("a removed table tracking a lock was not collected")
	}
	tab, added := s.Add(c)
	if !added || len(s.Tables()) != 1 {
		t.Errorf("Add after Remove = %v, %v, want a new table", tab, added)
	}
}

// WithoutTracking on a context it made returns it as it is, allocating
// nothing: a renew call's context derives from one made so once.
func TestWithoutTrackingOnce(t *testing.T) {
	base := WithoutTracking(context.Background())
	if !Untracked(base) || Untracked(context.Background()) {
		t.Fatalf("Untracked: %v for WithoutTracking's context, %v for Background; want true and false", Untracked(base), Untracked(context.Background()))
	}
	var again context.Context
	if n := testing.AllocsPerRun(100, func() { again = WithoutTracking(base) }); n != 0 || again != base {
		t.Errorf("WithoutTracking of an untracked context: %v allocations, same context %v; want 0 and true", n, again == base)
	}
}
