package watchdog

import (
	"slices"
	"time"

	"github.com/lockwatch/lockwatch/internal/table"
)

// timeq is a binary min-heap of entries by a time, in ns since the set's
// epoch. It is lazy: an entry that leaves the schedule keeps its slot
// until the slot is popped, and whoever pops it checks the entry's state
// (an entry may also have more than one slot: the holder's refresh to a
// shorter TTL adds an earlier one). Guarded by the table lock.
type timeq []tslot

type tslot struct {
	at  int64
	e   *table.Entry
	gen uint8 // the wait heap: the entry's generation when the slot was made (see table.Entry.Gen)
}

func (q *timeq) push(at int64, e *table.Entry, gen uint8) {
	*q = append(*q, tslot{at, e, gen})
	s := *q
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if s[p].at <= s[i].at {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

// head returns the earliest slot; ok is false when q is empty.
func (q timeq) head() (s tslot, ok bool) {
	if len(q) == 0 {
		return tslot{}, false
	}
	return q[0], true
}

func (q *timeq) pop() tslot {
	s := *q
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s[n] = tslot{}
	s = s[:n]
	s.down(0)
	*q = s
	return top
}

func (q timeq) down(i int) {
	n := len(q)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && q[r].at < q[l].at {
			m = r
		}
		if q[i].at <= q[m].at {
			return
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
}

// keep drops the slots whose entry keep rejects, and lets a large array
// go when the heap shrank a lot.
func (q *timeq) keep(keep func(e *table.Entry) bool) {
	s := slices.DeleteFunc(*q, func(x tslot) bool { return !keep(x.e) })
	clear((*q)[len(s):])
	for i := len(s)/2 - 1; i >= 0; i-- {
		s.down(i)
	}
	if cap(s) > 4*len(s)+queueSlack {
		s = slices.Clip(slices.Clone(s))
	}
	*q = s
}

// queueSlack is how many slots a schedule's array may have room for beyond
// four times its length before it lets the array go: 128 KB, so that a
// schedule that empties and fills again with every batch of short locks
// keeps its array rather than growing a new one each time.
const queueSlack = 8192

// schedule makes sure the scheduler looks at e at at (ns since the set's
// epoch): it renews e then if it is due, or finds when it is. The caller
// computes at from what e is now (its last confirmation, its TTL), so the
// last call is the one that counts: an entry scheduled already gets a new
// slot, and its old one goes stale. One ready to be sent needs none. The
// table must be locked.
func (l *lane) schedule(e *table.Entry, at int64) {
	if e.IsReady() {
		return
	}
	if e.Enqueue() {
		l.listed++
		l.forgetFresh(e)
		l.grew()
	}
	l.requeue(e, at)
}

// relist gives e, ready, a slot in the ready queue by its tell key now,
// and wakes the scheduler by its tell time: its holder refreshed it, and
// the slot it has was keyed by the TTL it had. A refresh to a shorter TTL
// left it there behind locks whose keys came first, while the lane was
// busy with them, past its new expiry (told 693 ms after it, under -race
// on a loaded machine). The slot it had stays, lazily: whichever is popped
// while e is no longer ready is passed over. The table must be locked.
func (l *lane) relist(e *table.Entry) {
	key := tellKey(e)
	l.ready.push(key, e, 0)
	l.wakeBy(l.w.set.At(key - tellMargin(e.TTL, l.tellLagNs.Load())))
}

// grew notes that the lane's schedule has one more lock; the first time
// it holds a call's worth, the lane warms its pool (startWarm): from then
// on it may have two calls in flight and hedge them. The table must be
// locked.
func (l *lane) grew() {
	if !l.bigWarm && l.listed+l.fresh >= l.c.chunk {
		l.bigWarm = true
		l.startWarm()
	}
}

// requeue gives e, scheduled, a slot at at: its only valid one, of the
// entry's next generation. The table must be locked.
func (l *lane) requeue(e *table.Entry, at int64) {
	if hold := int64(l.w.o.maxHold); hold > 0 {
		at = min(at, e.Obtained+hold) // its max hold ends it then
	}
	l.wait.push(at, e, e.NextGen())
	l.wakeBy(l.w.set.At(at))
}

// unlist counts e, an entry of the schedule, out of it; the table must be
// locked.
func (l *lane) unlist(e *table.Entry) {
	if e.Queued() || e.IsReady() {
		l.listed--
	}
}

// makeUrgent lists e to be renewed at once, in calls of at most keys
// keys: its call was hedged, or another watched client obtained its key.
// The table must be locked.
func (l *lane) makeUrgent(e *table.Entry, keys int) {
	listed := e.Queued() || e.IsReady()
	if e.Detached() || !e.MakeReady() {
		return // in a ready list already: it goes out soon
	}
	if !listed {
		l.listed++
	}
	l.forgetFresh(e)
	l.urgent = append(l.urgent, e)
	l.urgentN = min(l.urgentN, keys)
}

// minStale is how many ended locks a schedule may hold before the
// holder's releases ask the scheduler to drop them (when they are also at
// least half the schedule, so that each pass over it is paid for by the
// releases that asked for it).
const minStale = 256

// ended learns that the holder ended a lock that is in l's schedule: a
// lock released long before it would be due keeps its slot until then,
// and a process that obtains and releases many short locks would hold
// thousands of them. Once they are many, and half the schedule, the
// scheduler drops them.
func (l *lane) ended() {
	if n := l.stale.Add(1); n >= minStale && n >= l.size.Load()/2 && !l.compact.Swap(true) {
		l.kickDue()
	}
}

// compactLocked drops ended entries from the schedule when ended asked
// for it; the table must be locked.
func (l *lane) compactLocked() {
	if !l.compact.Swap(false) {
		return
	}
	l.stale.Store(0)
	live := func(e *table.Entry) bool {
		if e.Detached() {
			if e.Queued() || e.IsReady() {
				l.unlist(e)
				e.Dequeue()
			}
			return false
		}
		return true
	}
	l.wait.keep(live)
	l.ready.keep(live)
	l.overdue = slices.DeleteFunc(l.overdue, func(e *table.Entry) bool { return !live(e) })
	l.urgent = slices.DeleteFunc(l.urgent, func(e *table.Entry) bool { return !live(e) })
}

// freshWalk is how many locks of the table a fresh lock may stand for at
// most: the look that lists fresh locks visits every lock of the table,
// so a table much larger than its fresh locks (a few short locks among
// many long ones) lists its short locks at once instead.
const freshWalk = 8

// leaveFresh marks e, a lock that cannot wait for the next tick and is not
// scheduled, Fresh rather than scheduling it, and makes sure the scheduler
// looks at the table by the time e is due (renewAt): the look schedules
// every fresh lock still held. A lock
// released before then costs the schedule nothing. leaveFresh declines
// (false) when the table is too large for its fresh locks (freshWalk).
// The table must be locked.
func (l *lane) leaveFresh(t *table.Table, e *table.Entry) bool {
	if !e.Fresh() {
		if (l.fresh+1)*freshWalk < t.LenLocked() {
			return false
		}
		e.MakeFresh()
		l.fresh++
		l.grew()
	}
	if at := renewAt(e, 0); l.freshAt == 0 || at < l.freshAt {
		l.freshAt = at
		l.wakeBy(l.w.set.At(at))
	}
	return true
}

// forgetFresh takes e's Fresh mark away, if it has one; the table must be
// locked. fresh may count more entries than are marked (an entry dropped
// where no lane sees it keeps its mark), never fewer: a look the
// scheduler did not need costs a walk, one it skipped would cost a lock.
func (l *lane) forgetFresh(e *table.Entry) {
	if e.Unfresh() {
		l.fresh--
	}
}

// lookFresh schedules the lane's fresh locks still held once the first of
// them may be renewed (see leaveFresh).
func (l *lane) lookFresh(nowNs int64) {
	t := l.c.t
	t.Lock()
	look := l.freshAt != 0 && nowNs >= l.freshAt
	if look {
		l.freshAt = 0
		look = l.fresh > 0 // all released (the usual end of short locks): nothing to list
	}
	t.Unlock()
	if look {
		l.w.queueFast(t) // schedules every short lock not scheduled yet, the fresh ones among them
	}
}

// wakeBy makes sure the scheduler runs by when; the table must be locked.
// A pass finds by itself when it must run next.
func (l *lane) wakeBy(when time.Time) {
	if l.inPass {
		return
	}
	if l.dueAt.IsZero() || when.Before(l.dueAt) {
		l.dueAt = when // until the scheduler looks: later newcomers need no wake
		l.kickDue()
	}
}
