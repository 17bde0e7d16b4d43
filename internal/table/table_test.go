package table

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"
)

func newTable(t testing.TB, cluster bool) *Table {
	t.Helper()
	s := NewSet([]string{"a"}, nil)
	var c redis.UniversalClient = redis.NewClient(&redis.Options{})
	if cluster {
		c = redis.NewClusterClient(&redis.ClusterOptions{})
	}
	t.Cleanup(func() { _ = c.Close() })
	tab, added := s.Add(c)
	if !added || tab.Cluster != cluster {
		t.Fatalf("Add = %v, %v; want a new table, cluster %v", tab, added, cluster)
	}
	return tab
}

func obtain(tab *Table, key, value string, ttl time.Duration, keys ...string) *Entry {
	e, _ := tab.Apply(Change{Op: OpObtain, Key: key, Keys: keys, Value: value, TTL: ttl}, time.Now())
	return e
}

func TestApply(t *testing.T) {
	tab := newTable(t, false)
	e := obtain(tab, "k", "v", time.Second)
	if e == nil || tab.Len() != 1 || e.TTL != time.Second || e.Multi() || tab.Info(e).Keys != nil {
		t.Fatalf("obtain: entry %+v, Len %d; want one single-key lock of 1s", e, tab.Len())
	}
	// Obtained again with the same value: the same entry, new TTL.
	if again := obtain(tab, "k", "v", 2*time.Second); again != e || e.TTL != 2*time.Second {
		t.Errorf("re-obtain with the same value = %p (TTL %v), want %p with 2s", again, e.TTL, e)
	}
	// Obtained again with another value: a new entry; the old one detached.
	other := obtain(tab, "k", "w", time.Second)
	if other == e || e.flags&Detached == 0 || tab.Get("k") != other {
		t.Errorf("re-obtain with another value: new entry %v, old detached %v", other != e, e.flags&Detached != 0)
	}
	if got, tracked := tab.Apply(Change{Op: OpRefresh, Key: "k", Value: "v", TTL: time.Minute}, time.Now()); got != nil || tracked {
		t.Errorf("refresh with a value not tracked = %v, %v, want nothing", got, tracked)
	}
	if got, _ := tab.Apply(Change{Op: OpRefresh, Key: "k", Value: "w", TTL: time.Minute}, time.Now()); got != other || other.TTL != time.Minute {
		t.Errorf("refresh = %v (TTL %v), want the entry with 1m", got, other.TTL)
	}
	if got, tracked := tab.Apply(Change{Op: OpRelease, Key: "k", Value: "w"}, time.Now()); got != other || tracked || tab.Len() != 0 {
		t.Errorf("release = %v, %v, Len %d, want the entry, untracked, 0", got, tracked, tab.Len())
	}
	m := obtain(tab, "a", "v", time.Second, "a", "b", "c")
	tab.Lock()
	n, keys := tab.KeyCountLocked(m), tab.KeysLocked(m)
	tab.Unlock()
	if !m.Multi() || n != 3 || fmt.Sprint(keys) != "[a b c]" {
		t.Errorf("multi-key obtain: %d keys %v, want [a b c]", n, keys)
	}
	tab.Lock()
	i, ok := tab.Drop(m)
	tab.Unlock()
	if !ok || fmt.Sprint(i.Keys) != "[a b c]" || len(tab.multi) != 0 {
		t.Errorf("Drop(multi) = %+v, %v, multi map %v: want its keys in the snapshot and nothing kept", i, ok, tab.multi)
	}
}

func TestSlotCounts(t *testing.T) {
	tab := newTable(t, true)
	obtain(tab, "{x}1", "v", time.Second)
	obtain(tab, "{x}2", "v", time.Second)
	e := obtain(tab, "y", "v", time.Second)
	if e.Slot() != SlotOf("y") {
		t.Errorf("Slot = %d, want %d", e.Slot(), SlotOf("y"))
	}
	tab.Apply(Change{Op: OpRelease, Key: "{x}1", Value: "v"}, time.Now())
	tab.SlotCounts(func(c []int32) {
		if c[SlotOf("x")] != 1 || c[SlotOf("y")] != 1 {
			t.Errorf("slot counts x %d, y %d; want 1 and 1", c[SlotOf("x")], c[SlotOf("y")])
		}
	})
}

func TestHoldSettleDrop(t *testing.T) {
	tab := newTable(t, false)
	a, b, c := obtain(tab, "a", "v", time.Second), obtain(tab, "b", "v", time.Second), obtain(tab, "c", "v", time.Second)
	busy := tab.Mark(context.Background(), "c", "v", 0)
	held := tab.Hold([]*Entry{a, b, c})
	if len(held) != 2 || a.flags&InFlight == 0 {
		t.Fatalf("Hold(a, b, c with c busy) = %d entries, want a and b in flight", len(held))
	}
	if again := tab.Hold([]*Entry{a}); len(again) != 0 {
		t.Errorf("Hold of an entry in flight = %d entries, want none", len(again))
	}
	sent := tab.Set().Since(time.Now().Add(time.Second))
	var seen []string
	tab.Settle(held, []int8{Renewed, Gone}, sent, func(_ int, e *Entry, r int8, dropped *Info) {
		seen = append(seen, fmt.Sprint(e.Key, r, dropped != nil))
	})
	if fmt.Sprint(seen) != "[a1 false b0 true]" {
		t.Errorf("Settle calls = %v, want a renewed, b dropped", seen)
	}
	if a.Confirmed != sent || a.Renewals != 1 || a.flags&InFlight != 0 {
		t.Errorf("a after Settle: confirmed %d renewals %d flags %b, want %d, 1, not in flight", a.Confirmed, a.Renewals, a.flags, sent)
	}
	if tab.Get("b") != nil || b.flags&Detached == 0 {
		t.Errorf("b after Settle(Gone) still tracked")
	}
	// A busy entry is not dropped: the holder's command decides.
	tab.Lock()
	if _, ok := tab.Drop(c); ok {
		t.Error("Drop(busy c) = true, want false")
	}
	tab.Unlock()
	tab.Unmark(busy)
	tab.Lock()
	_, first := tab.Drop(c)
	_, second := tab.Drop(c)
	tab.Unlock()
	if !first || second {
		t.Errorf("Drop(c) twice = %v, %v, want true then false", first, second)
	}
}

// Mark waits while its key's renewal is in flight, and Release ends it.
func TestMarkWaitsForRenewal(t *testing.T) {
	tab := newTable(t, false)
	e := obtain(tab, "k", "v", time.Second)
	held := tab.Hold([]*Entry{e})
	var marked atomic.Bool
	done := make(chan Marked)
	go func() {
		m := tab.Mark(context.Background(), "k", "v", time.Millisecond)
		marked.Store(true)
		done <- m
	}()
	time.Sleep(50 * time.Millisecond)
	if marked.Load() {
		t.Fatal("Mark returned while the renewal was in flight")
	}
	tab.Release(held, tab.Set().Since(time.Now())) // given up waiting: late, still on its way
	time.Sleep(20 * time.Millisecond)
	if marked.Load() {
		t.Fatal("Mark of a refresh to a shorter TTL returned while the renewal given up was still on its way (Late)")
	}
	if m := tab.Mark(context.Background(), "k", "v", 0); m.Entry() != e { // a release: need not wait for a late renewal
		t.Fatalf("Mark of a release while the renewal is late = %p, want %p at once", m.Entry(), e)
	} else {
		tab.Unmark(m)
	}
	tab.EndLate(held)
	if m := <-done; m.Entry() != e {
		t.Errorf("Mark = %p, want %p", m.Entry(), e)
	} else {
		tab.Unmark(m)
	}
	if got := tab.Mark(context.Background(), "unknown", "v", 0); got.Entry() != nil {
		t.Errorf("Mark(unknown) = %v, want nothing marked", got.Entry())
	}
	tab.Unmark(Marked{})
}

// askedCtx is a holder's context whose Err and Value are the holder's
// code: each ask tries the table's lock, as a watchdog.Context's look
// does, and counts the asks that found it held.
type askedCtx struct {
	context.Context
	tab    *Table
	asks   atomic.Int64
	locked atomic.Int64
}

func (c *askedCtx) try() {
	c.asks.Add(1)
	if !c.tab.TryLock() {
		c.locked.Add(1)
		return
	}
	c.tab.Unlock()
}

func (c *askedCtx) Err() error {
	c.try()
	return c.Context.Err()
}

func (c *askedCtx) Value(key any) any {
	c.try()
	return c.Context.Value(key)
}

// Mark asks the holder's context nothing but Done with the table locked,
// while it waits for a renewal and as it stops waiting (its cancel): the
// context's Err and Value may lock the table (a watchdog.Context looks at
// it). Seen failing when Mark asked Err in its wait loop and registered
// context.AfterFunc (which asks Value) with the table locked: a refresh
// made with a job's context past its tell time deadlocked.
func TestMarkAsksNoContextLocked(t *testing.T) {
	tab := newTable(t, false)
	e := obtain(tab, "k", "v", time.Second)
	held := tab.Hold([]*Entry{e})
	base, cancel := context.WithCancel(context.Background())
	ctx := &askedCtx{Context: base, tab: tab}
	done := make(chan Marked)
	go func() { done <- tab.Mark(ctx, "k", "v", 0) }()
	select {
	case m := <-done:
		t.Fatalf("Mark = %p while the renewal was in flight, want a wait", m.Entry())
	case <-time.After(50 * time.Millisecond):
	}
	tab.Release(held, tab.Set().Since(time.Now()))
	tab.EndLate(held)
	select {
	case m := <-done:
		tab.Unmark(m)
	case <-time.After(5 * time.Second):
		t.Fatal("Mark did not return within 5s of the renewal's end")
	}
	// And a wait ended by the context.
	held = tab.Hold([]*Entry{e})
	go func() { done <- tab.Mark(ctx, "k", "v", 0) }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case m := <-done:
		tab.Unmark(m)
	case <-time.After(5 * time.Second):
		t.Fatal("Mark did not return within 5s of its context's cancel")
	}
	tab.Release(held, tab.Set().Since(time.Now()))
	tab.EndLate(held)
	if ctx.asks.Load() == 0 {
		t.Error("Mark asked the context nothing: the test did not happen")
	}
	if n := ctx.locked.Load(); n > 0 {
		t.Errorf("Mark asked the context's Err or Value %d times of %d with the table locked, want none", n, ctx.asks.Load())
	}
}

// Only the owner's command marks its lock: another value (another
// goroutine trying to obtain the key) neither marks it nor waits for its
// renewal, and the owner's wait ends with its context.
func TestMarkIsTheOwners(t *testing.T) {
	tab := newTable(t, false)
	e := obtain(tab, "k", "v", time.Second)
	held := tab.Hold([]*Entry{e})
	if m := tab.Mark(context.Background(), "k", "other", 0); m.Entry() != nil || e.Busy() {
		t.Fatalf("Mark(k, other) = %v, busy %v; want nil, not busy", m.Entry(), e.Busy())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	start := time.Now()
	m := tab.Mark(ctx, "k", "v", 0)
	if m.Entry() != e || ctx.Err() == nil {
		t.Errorf("Mark(k, v) with a 30ms context = %p after %v (ctx err %v), want %p once the context ended", m.Entry(), time.Since(start), ctx.Err(), e)
	}
	tab.Unmark(m)
	tab.Release(held, tab.Set().Since(time.Now()))
}

// A late answer is applied: a renewal confirms as of when it was sent; a
// loss is taken when nothing confirmed the lock since, even while a later
// renewal is in flight (it cannot bring the key back).
func TestSettleLate(t *testing.T) {
	tab := newTable(t, false)
	a, b, c := obtain(tab, "a", "v", time.Second), obtain(tab, "b", "v", time.Second), obtain(tab, "c", "v", time.Second)
	d := obtain(tab, "d", "v", time.Second)
	held := tab.Hold([]*Entry{a, b, c, d})
	sent := tab.Set().Since(time.Now())
	tab.Release(held, sent) // hedged: late
	again := tab.Hold([]*Entry{c, d})
	if !tab.LateLocked(c) {
		t.Error("c after Release: not late")
	}
	tab.Settle(again[1:], []int8{Renewed}, tab.Set().Since(time.Now()), nil) // d confirmed since
	tab.SettleLate(held, []int8{Renewed, Gone, Taken, Gone}, sent, nil)
	if a.Confirmed != sent || a.Renewals != 1 {
		t.Errorf("a after a late renewal: confirmed %d, renewals %d; want %d, 1", a.Confirmed, a.Renewals, sent)
	}
	if tab.Get("b") != nil {
		t.Error("b after a late Gone: still tracked, want dropped")
	}
	if tab.Get("c") != nil {
		t.Error("c after a late Taken while a later renewal is in flight: still tracked, want dropped")
	}
	if tab.Get("d") == nil {
		t.Error("d after a late Gone older than its confirmation: dropped, want kept")
	}
	if tab.LateLocked(a) || tab.LateLocked(d) {
		t.Error("late after the late renewal ended, want not")
	}
	tab.Settle(again[:1], []int8{Renewed}, tab.Set().Since(time.Now()), nil) // c's renewal ends: detached, nothing to do
}

// A late renewal sent while the key was held as far as the watchdog knew
// may have renewed it as it came, answered or not: the key may live until
// its send time plus the TTL, and no longer once a confirmation outlives
// it. One sent after the key may have expired extends nothing.
func TestLateRenewalMayRenew(t *testing.T) {
	tab := newTable(t, false)
	a := obtain(tab, "a", "v", time.Second)
	b := obtain(tab, "b", "v", time.Second)
	held := tab.Hold([]*Entry{a})
	sent := a.Confirmed + int64(600*time.Millisecond)
	tab.Release(held, sent) // hedged
	held = tab.Hold([]*Entry{b})
	tab.Release(held, b.Confirmed+int64(time.Second)) // sent when b may have expired
	tab.SettleLate([]*Entry{a, b}, []int8{Failed, Failed}, sent, nil)
	tab.Lock()
	defer tab.Unlock()
	if tab.LateLocked(a) {
		t.Error("a: late after its late renewal ended")
	}
	if got, want := tab.MayLiveUntilLocked(a), sent+int64(time.Second); got != want {
		t.Errorf("a, a late renewal sent at %d, no answer: may live until %d, want %d (its send time plus the TTL)", sent, got, want)
	}
	if got, want := tab.MayLiveUntilLocked(b), b.Confirmed+int64(time.Second); got != want {
		t.Errorf("b, a late renewal sent as it may have expired: may live until %d, want %d (its confirmation plus the TTL)", got, want)
	}
	a.Confirmed = sent + 1 // a later confirmation outlives it
	if got, want := tab.MayLiveUntilLocked(a), a.Confirmed+int64(time.Second); got != want {
		t.Errorf("a confirmed after the late renewal's send: may live until %d, want %d", got, want)
	}
}

// A late renewal that ended with no answer and a connection's failure
// takes back what its release noted: the key lives no longer for it. A
// time two late renewals noted stays until both took it back, and one
// noted anew after a confirmation outlived the first is not taken back by
// the first.
func TestWithdrawLate(t *testing.T) {
	tab := newTable(t, false)
	a := obtain(tab, "a", "v", time.Second)
	ttl := int64(time.Second)
	release := func(sent int64) []bool {
		held := tab.Hold([]*Entry{a})
		tab.Lock()
		defer tab.Unlock()
		return tab.ReleaseLocked(held, sent, nil)
	}
	mayLive := func() int64 {
		tab.Lock()
		defer tab.Unlock()
		return tab.MayLiveUntilLocked(a)
	}
	e := a.Confirmed + ttl
	first := a.Confirmed + int64(300*time.Millisecond)
	m1 := release(first)
	if len(m1) != 1 || !m1[0] {
		t.Fatalf("release of a renewal sent before E: marked %v, want [true]", m1)
	}
	second := first + int64(100*time.Millisecond)
	m2 := release(second)
	tab.WithdrawLate([]*Entry{a}, m2, second)
	if got := mayLive(); got != second+ttl {
		t.Errorf("after the second of two renewals took its note back: may live until %+d, want %+d (the notes stay until both are taken back)", got-e, second+ttl-e)
	}
	tab.WithdrawLate([]*Entry{a}, m1, first)
	if got := mayLive(); got != e {
		t.Errorf("after both took their notes back: may live until %+d, want E (%+d)", got-e, 0)
	}
	if m := release(a.Confirmed + ttl); m[0] {
		t.Errorf("release of a renewal sent at E: marked, want not (it extends nothing)")
	}
	// Noted anew after a confirmation outlived an older note.
	old := release(first)
	a.Confirmed = first + 1
	mayLive() // the confirmation outlives the note: it goes
	later := a.Confirmed + int64(200*time.Millisecond)
	release(later)
	tab.WithdrawLate([]*Entry{a}, old, first)
	if got, want := mayLive(), later+ttl; got != want {
		t.Errorf("an older renewal took its note back after a newer one noted: may live until %d, want %d (the newer one's)", got, want)
	}
}

type takenObserver struct {
	taken []string
}

func (o *takenObserver) ChangedLocked(*Table, *Entry) bool        { return false }
func (o *takenObserver) Changed(*Table, *Entry)                   {}
func (o *takenObserver) Ended(*Table, *Entry, End, bool)          {}
func (o *takenObserver) CopyNotHeld(*Table, *Entry, *Group, bool) {}
func (o *takenObserver) Contended(*Table, *Entry)                 {}
func (o *takenObserver) Taken(t *Table, old *Entry, info Info) {
	o.taken = append(o.taken, info.Key+"="+info.Value+fmt.Sprint(t.Get(info.Key) != nil))
}

// An obtain of a tracked key with another value reports the old owner's
// lock taken, before the new one is linked; the same value is the same
// owner.
func TestObtainWithAnotherValue(t *testing.T) {
	tab := newTable(t, false)
	o := &takenObserver{}
	tab.Set().Observe(o)
	defer tab.Set().Observe(nil)
	obtain(tab, "k", "a", time.Second)
	obtain(tab, "k", "a", 2*time.Second) // the same owner again
	if len(o.taken) != 0 {
		t.Fatalf("Taken after an obtain with the same value: %v, want none", o.taken)
	}
	e := obtain(tab, "k", "b", time.Second)
	if fmt.Sprint(o.taken) != "[k=atrue]" || tab.Get("k") != e {
		t.Errorf("Taken after an obtain with another value: %v, want [k=atrue] and b tracked", o.taken)
	}
}

// A table that shrank to a quarter of its peak is made anew, so that its
// memory goes back.
func TestShrink(t *testing.T) {
	tab := newTable(t, false)
	const n = 100_000
	for i := range n {
		obtain(tab, fmt.Sprint("s:", i), "v", time.Second)
	}
	heapWith := heapInUse()
	for i := range n {
		tab.Apply(Change{Op: OpRelease, Key: fmt.Sprint("s:", i), Value: "v"}, time.Now())
	}
	if tab.Len() != 0 || tab.peak >= shrinkAt {
		t.Fatalf("after releasing every lock: Len %d, peak %d, want 0 and below %d", tab.Len(), tab.peak, shrinkAt)
	}
	if heapAfter := heapInUse(); heapWith-heapAfter < 5<<20 {
		t.Errorf("heap with %d locks %d B, after releasing them %d B: want the table's memory back", n, heapWith, heapAfter)
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// Walk lets the table go every few thousand entries, so that a holder's
// command sent while a large table is listed does not wait for the end.
func TestWalkLetsCommandsThrough(t *testing.T) {
	tab := newTable(t, false)
	const n = 200_000
	for i := range n {
		obtain(tab, fmt.Sprint("big:", i), "v", time.Minute)
	}
	started := make(chan struct{})
	var walked, obtainedAt atomic.Int64
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		first := true
		tab.Walk(func(*Entry) bool {
			if first {
				first = false
				close(started)
			}
			walked.Add(1)
			runtime.Gosched() // a slow walk
			return false
		}, nil)
	}()
	<-started
	obtain(tab, "late", "v", time.Minute)
	obtainedAt.Store(walked.Load())
	<-finished
	if got := obtainedAt.Load(); got >= n {
		t.Errorf("the obtain went through after the walk visited %d of %d entries, want well before the end", got, n)
	}
}

// An entry is 64 bytes, and a block of them (entryBlock) a size class of
// its own: a process may track a million.
func TestEntrySize(t *testing.T) {
	if n := unsafe.Sizeof(Entry{}); n > 64 {
		t.Errorf("sizeof(Entry) = %d, want at most 64", n)
	}
	if n := unsafe.Sizeof([entryBlock]Entry{}); n != 512 {
		t.Errorf("sizeof([entryBlock]Entry) = %d, want 512, a size class of Go's allocator", n)
	}
}

func TestArgsPrintAsKeyAndValue(t *testing.T) {
	e := &Entry{Key: "job:1", Value: "token"}
	if got := fmt.Sprint(e.KeyArg(), " ", e.ValueArg()); got != "job:1 token" {
		t.Errorf("args print as %q, want %q", got, "job:1 token")
	}
	for _, a := range []any{e.KeyArg(), e.ValueArg()} {
		m, ok := a.(interface{ MarshalBinary() ([]byte, error) })
		if !ok {
			t.Fatalf("%T is no encoding.BinaryMarshaler", a)
		}
		b, err := m.MarshalBinary()
		if err != nil || (string(b) != "job:1" && string(b) != "token") {
			t.Errorf("MarshalBinary = %q, %v", b, err)
		}
	}
	empty := &Entry{}
	if b, _ := empty.KeyArg().(interface{ MarshalBinary() ([]byte, error) }).MarshalBinary(); b == nil || len(b) != 0 {
		t.Errorf("MarshalBinary of an empty key = %v, want an empty slice", b)
	}
	if n := testing.AllocsPerRun(100, func() { _ = e.KeyArg(); _ = e.ValueArg() }); n != 0 {
		t.Errorf("KeyArg and ValueArg allocate %v times, want 0", n)
	}
}

// Tracking a lock makes no allocation of its own in the steady state: a
// table that holds about a thousand locks while others are obtained and
// released (a batch of jobs) takes its entries out of blocks, a fraction of
// an allocation per lock. The observer is the watchdog's path: none here.
func TestObtainAllocatesLessThanOncePerLock(t *testing.T) {
	tab := newTable(t, false)
	keys := make([]string, 2048)
	for i := range keys {
		keys[i] = fmt.Sprint("job:", i)
	}
	for _, k := range keys[:1024] {
		obtain(tab, k, "v", time.Second)
	}
	i := 0
	n := testing.AllocsPerRun(4096, func() {
		k := keys[1024+i%1024]
		i++
		tab.ApplyNow(&Change{Op: OpObtain, Key: k, Value: "v", TTL: time.Second})
		tab.ApplyNow(&Change{Op: OpRelease, Key: k, Value: "v"})
	})
	if n != 0 {
		t.Errorf("an obtain and a release allocate %v times, want 0 (less than one on average)", n)
	}
	if tab.Len() != 1024 {
		t.Errorf("Len = %d, want the 1024 locks still held", tab.Len())
	}
}

// Entries taken out of one block are separate locks: releasing one leaves
// its neighbours as they were, and every lock of a block can be released.
func TestEntriesOfOneBlock(t *testing.T) {
	tab := newTable(t, false)
	var es []*Entry
	for i := range 3 * entryBlock {
		es = append(es, obtain(tab, fmt.Sprint("b:", i), fmt.Sprint("v", i), time.Duration(i+1)*time.Second))
	}
	seen := make(map[*Entry]bool)
	for _, e := range es {
		if seen[e] {
			t.Fatalf("entry %p handed out twice", e)
		}
		seen[e] = true
	}
	for i := 0; i < len(es); i += 2 {
		tab.Apply(Change{Op: OpRelease, Key: es[i].Key, Value: es[i].Value}, time.Now())
	}
	for i, e := range es {
		want := fmt.Sprint("v", i)
		tracked := tab.Get(fmt.Sprint("b:", i)) == e
		if e.Value != want || e.TTL != time.Duration(i+1)*time.Second || tracked != (i%2 == 1) {
			t.Errorf("entry %d: value %q, TTL %v, tracked %v; want %q, %v, %v", i, e.Value, e.TTL, tracked, want, time.Duration(i+1)*time.Second, i%2 == 1)
		}
	}
}

// A refresh on its way is kept apart from a release (the watchdog tells
// the holder of the one by its tell time, not of the other), counted per
// command: the lock is refreshing until the last refresh marked ends.
func TestMarkKeepsRefreshApart(t *testing.T) {
	tab := newTable(t, false)
	e := obtain(tab, "k", "v", time.Second)
	refreshing := func() bool {
		tab.Lock()
		defer tab.Unlock()
		return tab.RefreshingLocked(e)
	}
	release := tab.Mark(context.Background(), "k", "v", 0)
	if !e.Busy() || refreshing() {
		t.Fatalf("a release marked: busy %v, refreshing %v; want busy, not refreshing", e.Busy(), refreshing())
	}
	r1 := tab.Mark(context.Background(), "k", "v", time.Second)
	r2 := tab.Mark(context.Background(), "k", "v", 2*time.Second)
	if !refreshing() {
		t.Fatal("two refreshes marked: not refreshing, want refreshing")
	}
	tab.Unmark(r1)
	if !refreshing() {
		t.Error("one of two refreshes ended: not refreshing, want refreshing until the other ends")
	}
	tab.Unmark(r2)
	if refreshing() || !e.Busy() {
		t.Errorf("both refreshes ended, the release still on its way: refreshing %v, busy %v; want not refreshing, busy", refreshing(), e.Busy())
	}
	tab.Unmark(release)
	if e.Busy() {
		t.Error("every mark ended: still busy")
	}
}
