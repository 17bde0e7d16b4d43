package watchdog

import (
	"time"

	"github.com/lockwatch/lockwatch/internal/table"
)

// lockView is what the debug page shows of one tracked lock: never its
// value, which is the holder's token.
type lockView struct {
	Key         string    `json:"key"`
	Keys        []string  `json:"keys,omitempty"` // every key of a lock over several keys
	Endpoint    string    `json:"endpoint"`       // the client's address, or the cluster node's
	Source      string    `json:"source"`         // the adapter: redislock, redsync
	TTL         string    `json:"ttl"`
	TTLMillis   int64     `json:"ttl_ms"`
	HeldFor     string    `json:"held_for"`
	ObtainedAt  time.Time `json:"obtained_at"`
	ConfirmedAt time.Time `json:"confirmed_at"`
	Renewals    int64     `json:"renewals"`
	FastLane    bool      `json:"fast_lane"` // renewed between ticks (or waiting for a retry)
	Retrying    bool      `json:"retrying"`  // its last renewal failed
	InFlight    bool      `json:"in_flight"` // a renewal is on its way
	Servers     int       `json:"servers,omitempty"`
	Quorum      int       `json:"quorum,omitempty"` // for a lock over several servers (Redlock)
}

// locksView returns a view of every tracked lock, client by client in
// Watch order, at now. It holds each table's lock only while it copies the
// table.
func (w *Watchdog) locksView(now time.Time) []lockView {
	var out []lockView
	for _, t := range w.set.Tables() {
		c, _ := w.clientOf(t)
		start := len(out)
		var entries []*table.Entry
		t.Each(func(e *table.Entry) {
			i := t.InfoLocked(e)
			v := lockView{
				Key:         i.Key,
				Keys:        i.Keys,
				Source:      i.Source,
				TTL:         i.TTL.String(),
				TTLMillis:   i.TTL.Milliseconds(),
				HeldFor:     now.Sub(i.ObtainedAt).Round(time.Millisecond).String(),
				ObtainedAt:  i.ObtainedAt,
				ConfirmedAt: i.ConfirmedAt,
				Renewals:    i.Renewals,
				FastLane:    e.Flags&table.Queued != 0,
				Retrying:    e.Flags&table.Retry != 0,
				InFlight:    e.Flags&table.InFlight != 0,
				Endpoint:    endpointName(t.Client),
			}
			if c != nil {
				if l := c.owner(e); l != nil {
					v.Endpoint = l.name
				}
			}
			out = append(out, v)
			entries = append(entries, e)
		})
		// Groups are read after the table lock is let go.
		for j, e := range entries {
			if g := w.set.GroupOf(e); g != nil {
				_, out[start+j].Quorum, out[start+j].Servers = w.set.GroupState(g)
			}
		}
	}
	return out
}
