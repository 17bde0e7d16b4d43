package table

// Hold keeps in es the entries that may be renewed now (still tracked, no
// holder command on its way, no renewal in flight), marks them in flight
// and returns them, in es's array. Every held entry must be passed to
// [Table.Settle] once.
func (t *Table) Hold(es []*Entry) []*Entry {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.HoldLocked(es)
}

// HoldLocked is Hold with the table locked.
func (t *Table) HoldLocked(es []*Entry) []*Entry {
	out := es[:0]
	for _, e := range es {
		if e.flags&(Detached|InFlight|busyMask) == 0 {
			e.flags |= InFlight
			out = append(out, e)
		}
	}
	return out
}

// Renewal results, as Settle takes them.
const (
	Renewed int8 = 1  // Redis extended the lock
	Gone    int8 = 0  // a key of the lock does not exist
	Taken   int8 = -1 // a key holds another value
	Failed  int8 = 2  // no answer, or an error
)

// Settle ends the renewal of es (held by [Table.Hold]); res[i] is what
// happened to es[i], sent the time the renewal was sent. Renewed entries are
// confirmed at sent, and retried no more. Entries found gone or taken are dropped, unless a
// holder's command about them is on its way (it decides). fn, when not
// nil, is called with the table locked for every entry that was still
// tracked, with its index in es, its result and, when Settle dropped it, a
// snapshot of it taken before. Settle wakes holders waiting in [Table.Mark].
func (t *Table) Settle(es []*Entry, res []int8, sent int64, fn func(i int, e *Entry, r int8, dropped *Info)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, e := range es {
		e.flags &^= InFlight
		r := res[i]
		if e.flags&Detached != 0 {
			continue
		}
		var dropped *Info
		switch r {
		case Renewed:
			if sent > e.Confirmed {
				e.Confirmed = sent
			}
			e.Renewals++
			e.flags &^= Retry
		case Gone, Taken:
			if i, ok := t.Drop(e); ok {
				dropped = &i
			}
		}
		if fn != nil {
			fn(i, e, r, dropped)
		}
	}
	if t.waiting > 0 {
		t.cond.Broadcast()
	}
}

// SettleLate applies the answer of a renewal the watchdog stopped waiting
// for (its entries were let go by [Table.Release] and may be in flight
// again, in a later renewal): an answer is the truth about Redis whenever
// it comes. A renewed entry is confirmed as of sent, when that is later
// than its last confirmation. An entry found gone or taken is dropped only
// when nothing confirmed it after sent and no later renewal of it is in
// flight (that one's answer is fresher). fn is as for [Table.Settle].
func (t *Table) SettleLate(es []*Entry, res []int8, sent int64, fn func(i int, e *Entry, r int8, dropped *Info)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.endLateLocked(es)
	for i, e := range es {
		r := res[i]
		if e.flags&Detached != 0 {
			continue
		}
		var dropped *Info
		switch r {
		case Renewed:
			if sent > e.Confirmed {
				e.Confirmed = sent
				e.Renewals++
				e.flags &^= Retry
			}
		case Gone, Taken:
			if e.Confirmed > sent || e.flags&InFlight != 0 {
				continue
			}
			if i, ok := t.Drop(e); ok {
				dropped = &i
			}
		default:
			continue
		}
		if fn != nil {
			fn(i, e, r, dropped)
		}
	}
}

// Release ends in-flight marks without a result: the watchdog stopped
// waiting for the renewal, which is Late until it ends (its answer goes
// to [Table.SettleLate], its end without one to [Table.EndLate]).
func (t *Table) Release(es []*Entry) {
	t.mu.Lock()
	for _, e := range es {
		e.flags = e.flags&^InFlight | Late
	}
	t.mu.Unlock()
}

// EndLate ends the Late marks of es: their renewal ended without an
// answer to apply.
func (t *Table) EndLate(es []*Entry) {
	t.mu.Lock()
	t.endLateLocked(es)
	t.mu.Unlock()
}

func (t *Table) endLateLocked(es []*Entry) {
	for _, e := range es {
		e.flags &^= Late
	}
	if t.waiting > 0 {
		t.cond.Broadcast()
	}
}

// Drop untracks e unless it is already untracked or a holder's command
// about it is on its way, and returns a snapshot of it taken before (its
// keys included) and whether it did. Called with the table locked.
func (t *Table) Drop(e *Entry) (Info, bool) {
	if e.flags&Detached != 0 || e.Busy() {
		return Info{}, false
	}
	i := t.InfoLocked(e)
	t.detach(e)
	t.delete(e)
	return i, true
}

// DropAll untracks every entry and returns them with snapshots of them.
func (t *Table) DropAll() ([]*Entry, []Info) {
	t.mu.Lock()
	defer t.mu.Unlock()
	es := make([]*Entry, 0, len(t.locks))
	out := make([]Info, 0, len(t.locks))
	for _, e := range t.locks {
		es = append(es, e)
		out = append(out, t.InfoLocked(e))
		t.detach(e)
	}
	t.locks = make(map[string]*Entry)
	t.multi = nil
	t.verdicts = nil
	t.peak = 0
	if t.slots != nil {
		clear(t.slots)
	}
	return es, out
}

// ForgetLanes takes every entry out of the watchdog's lanes (Queued,
// Retry, Fresh): a watchdog that stops leaves nothing listed for the next.
func (t *Table) ForgetLanes() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.locks {
		e.flags &^= Queued | Retry | Fresh
	}
}

// EndAllLate ends every Late mark: the watchdog stopped, and renewals that
// have not ended by then no longer hold up the holders' refreshes.
func (t *Table) EndAllLate() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.locks {
		e.flags &^= Late
	}
	if t.waiting > 0 {
		t.cond.Broadcast()
	}
}
