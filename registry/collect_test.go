package registry

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// This file checks that the registry does not keep a client alive: a
// client the application drops, with no lock tracked on it, is collected,
// and its table leaves the set. A client with a lock tracked on it stays:
// the watchdog must renew through it.

// tenantClient returns a client of m, dialled in memory (miniredis's Dial).
func tenantClient(m *miniredis.Miniredis) *redis.Client {
	return redis.NewClient(&redis.Options{
		Dialer: func(context.Context, string, string) (net.Conn, error) { return m.Dial() },
	})
}

// useTenant watches a new client of m, obtains n locks through it,
// refreshes one and releases them all, checks that they were tracked and
// are not any more, closes the client and returns a weak pointer to it.
// Every tenant locks the same keys, so that miniredis's own memory (it
// keeps a version of every key it has seen) does not grow with them.
func useTenant(t *testing.T, reg *Registry, m *miniredis.Miniredis, i, n int) weak.Pointer[redis.Client] {
	t.Helper()
	c := tenantClient(m)
	if err := reg.Watch(c); err != nil {
		t.Fatal(err)
	}
	for j := range n {
		run(t, c, obtainSrc, fmt.Sprintf("lock:%d", j), "v", 300)
	}
	if got := len(lockedOn(reg, c)); got != n {
		t.Fatalf("tenant %d: %d locks tracked after %d obtains, want %d", i, got, n, n)
	}
	run(t, c, refreshSrc, "lock:0", "v", 300)
	for j := range n {
		run(t, c, releaseSrc, fmt.Sprintf("lock:%d", j), "v", 0)
	}
	if got := len(lockedOn(reg, c)); got != 0 {
		t.Fatalf("tenant %d: %d locks tracked after release, want 0", i, got)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	return weak.Make(c)
}

// lockedOn returns the locks reg tracks on c.
func lockedOn(reg *Registry, c redis.UniversalClient) []Lock {
	var out []Lock
	for _, l := range reg.Locks() {
		if l.Client == c {
			out = append(out, l)
		}
	}
	return out
}

// collect runs the GC until done reports true (cleanups run after a GC,
// on a goroutine of their own) or two seconds have passed.
func collect(done func() bool) {
	deadline := time.Now().Add(2 * time.Second)
	for {
		runtime.GC()
		if done() || time.Now().After(deadline) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// heapAlloc returns the bytes of live heap objects after two collections.
func heapAlloc() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// 400 clients watched, used (5 locks each, obtained and released)
// and closed, with no watchdog: once the application has dropped them, they
// are collected, their tables leave the set, and the heap is back within
// 2 MiB of where it was.
func TestDroppedClientsAreCollected(t *testing.T) {
	const clients, locks = 400, 5
	m := miniredis.RunT(t)
	reg := New(&scriptAdapter{})

	// A client the application keeps, and uses before and after: it stays
	// watched (and is the first in Watch order).
	kept := tenantClient(m)
	defer kept.Close()
	if err := reg.Watch(kept); err != nil {
		t.Fatal(err)
	}
	// A warm-up tenant, so that what is made once (miniredis's and
	// go-redis's first allocations) is in the baseline.
	useTenant(t, reg, m, -1, locks)
	collect(func() bool { return len(reg.set.Tables()) == 1 })
	goroutines, heap := runtime.NumGoroutine(), heapAlloc()

	gone := make([]weak.Pointer[redis.Client], 0, clients)
	for i := range clients {
		gone = append(gone, useTenant(t, reg, m, i, locks))
	}
	run(t, kept, obtainSrc, "kept", "v", 300)

	alive := func() int {
		n := 0
		for _, w := range gone {
			if w.Value() != nil {
				n++
			}
		}
		return n
	}
	collect(func() bool { return alive() == 0 && len(reg.set.Tables()) == 1 })
	heapAfter := heapAlloc()
	grown := int64(heapAfter) - int64(heap)
	n, tables := alive(), reg.set.Tables()
	t.Logf("after %d clients watched, used and closed: %d still alive, %d tables in the set, heap %+.2f MiB (%.1f KB a client), goroutines %+d",
		clients, n, len(tables), float64(grown)/(1<<20), float64(grown)/1024/clients, runtime.NumGoroutine()-goroutines)
	if n != 0 {
		t.Errorf("%d of %d dropped clients were not collected: the registry keeps them alive", n, clients)
	}
	if len(tables) != 1 || tables[0].Client != kept {
		t.Errorf("the set lists %d tables, want 1, the kept client's", len(tables))
	}
	if grown > 2<<20 {
		t.Errorf("heap grew by %.2f MiB after %d clients dropped, want at most 2 MiB", float64(grown)/(1<<20), clients)
	}
	if got := reg.Locks(); len(got) != 1 || got[0].Key != "kept" || got[0].Client != kept {
		t.Errorf("Locks() = %v, want the kept client's lock only", got)
	}
	if g := runtime.NumGoroutine() - goroutines; g > 10 {
		t.Errorf("%d goroutines more than before", g)
	}
	// The kept client is still watched: its locks are still tracked.
	run(t, kept, releaseSrc, "kept", "v", 0)
	run(t, kept, obtainSrc, "kept2", "v", 300)
	if _, ok := reg.Get(kept, "kept2"); !ok {
		t.Error("the kept client's lock obtained after the others were collected is not tracked")
	}
	if err := reg.Watch(kept); err != nil || len(reg.set.Tables()) != 1 {
		t.Errorf("Watch(kept) again = %v with %d tables, want nil and one table", err, len(reg.set.Tables()))
	}
}

// A client holding a lock stays watched, whether the application still
// refers to it or not: the watchdog must renew through it. A client the
// application refers to stays watched with no lock too. Once the last lock
// of a dropped client is released (through the client its Lock names),
// the client goes.
func TestClientsInUseStay(t *testing.T) {
	m := miniredis.RunT(t)
	reg := New(&scriptAdapter{})

	referenced := tenantClient(m) // referenced, holding a lock
	defer referenced.Close()
	idle := tenantClient(m) // referenced, no lock
	defer idle.Close()
	for _, c := range []*redis.Client{referenced, idle, referenced} { // Watch twice: one table
		if err := reg.Watch(c); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(reg.set.Tables()); n != 2 {
		t.Fatalf("%d tables after watching 2 clients (one twice), want 2", n)
	}
	run(t, referenced, obtainSrc, "held", "v", 300)
	run(t, idle, obtainSrc, "once", "v", 300)
	run(t, idle, releaseSrc, "once", "v", 0)

	// Dropped by the application while a lock is tracked on it.
	var orphan weak.Pointer[redis.Client]
	func() {
		c := tenantClient(m)
		if err := reg.Watch(c); err != nil {
			t.Fatal(err)
		}
		run(t, c, obtainSrc, "orphan", "v", 300)
		orphan = weak.Make(c)
	}()

	for range 5 {
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
	if orphan.Value() == nil {
		t.Fatal("a client with a lock tracked on it was collected")
	}
	if n := len(reg.set.Tables()); n != 3 {
		t.Errorf("%d tables, want 3: two referenced clients and one holding a lock", n)
	}
	if _, ok := reg.Get(referenced, "held"); !ok {
		t.Error("the lock held through a referenced client is no longer tracked")
	}
	var orphanLock Lock
	for _, l := range reg.Locks() {
		if l.Key == "orphan" {
			orphanLock = l
		}
	}
	if orphanLock.Client == nil {
		t.Fatalf("Locks() = %v: the dropped client's lock is not listed", reg.Locks())
	}
	// Its holder releases it through the client its Lock names, and lets
	// go of it: then the client goes.
	run(t, orphanLock.Client.(*redis.Client), releaseSrc, "orphan", "v", 0)
	_ = orphanLock.Client.Close()
	orphanLock = Lock{}
	collect(func() bool { return orphan.Value() == nil && len(reg.set.Tables()) == 2 })
	if orphan.Value() != nil {
		t.Error("a dropped client was not collected once its last lock was released")
	}
	if n := len(reg.set.Tables()); n != 2 {
		t.Errorf("%d tables after the dropped client went, want 2", n)
	}
	// The referenced clients are still watched.
	if err := reg.Watch(idle); err != nil || len(reg.set.Tables()) != 2 {
		t.Errorf("Watch(idle) again = %v with %d tables, want nil and 2", err, len(reg.set.Tables()))
	}
	run(t, idle, obtainSrc, "again", "v", 300)
	if _, ok := reg.Get(idle, "again"); !ok {
		t.Error("a lock obtained through the referenced idle client is not tracked")
	}
	if _, ok := reg.Get(referenced, "held"); !ok {
		t.Error("the referenced client's lock is no longer tracked")
	}
	runtime.KeepAlive(referenced)
	runtime.KeepAlive(idle)
}
