package watchdog

import (
	"slices"
	"time"

	"github.com/lockwatch/lockwatch/internal/table"
)

// lockView is what the debug page shows of one tracked lock: never its
// value, which is the holder's token.
type lockView struct {
	Key                string    `json:"key"`
	Keys               []string  `json:"keys,omitempty"` // every key of a lock over several keys
	Endpoint           string    `json:"endpoint"`       // the client's address, or the cluster node's
	Source             string    `json:"source"`         // the adapter: redislock, redsync
	TTL                string    `json:"ttl"`
	TTLMillis          int64     `json:"ttl_ms"`
	HeldFor            string    `json:"held_for"`
	HeldForMillis      int64     `json:"held_for_ms"`
	ObtainedAt         time.Time `json:"obtained_at"`
	ConfirmedAt        time.Time `json:"confirmed_at"`
	ConfirmedAgo       string    `json:"confirmed_ago"`
	ConfirmedAgoMillis int64     `json:"confirmed_ago_ms"`
	Renewals           int64     `json:"renewals"`
	FastLane           bool      `json:"fast_lane"` // renewed between ticks (or waiting for a retry)
	Retrying           bool      `json:"retrying"`  // its last renewal failed
	InFlight           bool      `json:"in_flight"` // a renewal is on its way
	CopiesHeld         int       `json:"copies_held,omitempty"`
	Quorum             int       `json:"quorum,omitempty"` // for a lock over several servers (Redlock)
	Servers            int       `json:"servers,omitempty"`
}

// lockSnap is a tracked lock as copied with its table locked: the raw
// fields only (no value), formatted later by view.
type lockSnap struct {
	key       string
	keys      []string // the table's slice, never changed once stored
	endpoint  string
	source    uint8
	ttl       time.Duration
	obtained  int64
	confirmed int64
	renewals  uint32
	flags     table.Flags

	held, quorum, servers int
}

// lockSnaps copies every tracked lock, client by client in Watch order. It
// holds a table's lock only while it copies a few thousand entries (see
// [table.Table.Walk]), formats nothing and makes no client.
func (w *Watchdog) lockSnaps() []lockSnap {
	var out []lockSnap
	var clients map[*table.Table]*client
	if m := w.view.Load(); m != nil {
		clients = *m
	}
	for _, t := range w.set.Tables() {
		c := clients[t] // nil for a client the watchdog has not adopted yet
		name := endpointName(t.Client)
		start := len(out)
		n := t.Len() // grown before, not while, the table is locked
		out = slices.Grow(out, n)
		entries := make([]*table.Entry, 0, n)
		t.Walk(func(e *table.Entry) bool {
			s := lockSnap{
				key:       e.Key,
				keys:      t.KeysLocked(e),
				endpoint:  name,
				source:    e.Source,
				ttl:       e.TTL,
				obtained:  e.Obtained,
				confirmed: e.Confirmed,
				renewals:  e.Renewals,
				flags:     e.State(),
			}
			if c != nil {
				if l := c.owner(e); l != nil {
					s.endpoint = l.name
				}
			}
			out = append(out, s)
			entries = append(entries, e)
			return false
		}, nil)
		// Groups are read after the table lock is let go.
		for j, e := range entries {
			if g := w.set.GroupOf(e); g != nil {
				s := &out[start+j]
				s.held, s.quorum, s.servers = w.set.GroupState(g)
			}
		}
	}
	return out
}

// lockViewOf formats s at now.
func (w *Watchdog) lockViewOf(s *lockSnap, now time.Time) lockView {
	obtained, confirmed := w.set.At(s.obtained), w.set.At(s.confirmed)
	held, ago := now.Sub(obtained), now.Sub(confirmed)
	return lockView{
		Key:                s.key,
		Keys:               s.keys,
		Endpoint:           s.endpoint,
		Source:             w.set.Names[s.source],
		TTL:                s.ttl.String(),
		TTLMillis:          s.ttl.Milliseconds(),
		HeldFor:            held.Round(time.Millisecond).String(),
		HeldForMillis:      held.Milliseconds(),
		ObtainedAt:         obtained,
		ConfirmedAt:        confirmed,
		ConfirmedAgo:       ago.Round(time.Millisecond).String(),
		ConfirmedAgoMillis: ago.Milliseconds(),
		Renewals:           int64(s.renewals),
		FastLane:           s.flags&(table.Queued|table.Fresh) != 0,
		Retrying:           s.flags&table.Retry != 0,
		InFlight:           s.flags&table.InFlight != 0,
		CopiesHeld:         s.held,
		Quorum:             s.quorum,
		Servers:            s.servers,
	}
}
