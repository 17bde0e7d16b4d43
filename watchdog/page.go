package watchdog

import (
	"cmp"
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lockwatch/lockwatch/internal/table"
)

// statsJSON is [Stats] on the page, without its endpoints.
type statsJSON struct {
	Ticks           int64      `json:"ticks"`
	Sweeps          int64      `json:"sweeps"`
	Renewals        int64      `json:"renewals"`
	Lost            int64      `json:"lost"`
	Failures        int64      `json:"failures"`
	RenewErrors     int64      `json:"renew_errors"`
	DeadlinesMissed int64      `json:"deadlines_missed"`
	Hedges          int64      `json:"hedges"`
	SpareCalls      int64      `json:"spare_calls"`
	Unconfirmed     int64      `json:"unconfirmed"`
	ToldLate        int64      `json:"told_late"`
	CallbackPanics  int64      `json:"callback_panics"`
	Lateness        string     `json:"lateness"`
	LatenessMillis  float64    `json:"lateness_ms"`
	Losses          lossesJSON `json:"losses"`
	Tracked         int        `json:"tracked"`
	FastLane        int        `json:"fast_lane"`
}

type lossesJSON struct {
	Gone        int64 `json:"gone"`
	Taken       int64 `json:"taken"`
	Unreachable int64 `json:"unreachable"`
	MaxHold     int64 `json:"max_hold"`
	Quorum      int64 `json:"quorum"`
}

// endpointJSON is [EndpointStats] on the page.
type endpointJSON struct {
	Endpoint        string     `json:"endpoint"`
	Down            bool       `json:"down"`
	Renewed         int64      `json:"renewed"`
	Failed          int64      `json:"failed"`
	Lost            int64      `json:"lost"`
	Sweeps          int64      `json:"sweeps"`
	FastLane        int        `json:"fast_lane"`
	Missed          int64      `json:"missed"`
	Hedges          int64      `json:"hedges"`
	SpareCalls      int64      `json:"spare_calls"`
	LastError       string     `json:"last_error"`
	LastOK          *time.Time `json:"last_ok"`
	LastOKAgo       string     `json:"last_ok_ago"`
	LastOKAgoMillis int64      `json:"last_ok_ago_ms"`
	LastSweep       string     `json:"last_sweep"`
	LastSweepMillis float64    `json:"last_sweep_ms"`
}

// pageData is the whole page; its JSON form is documented on Handler.
type pageData struct {
	GeneratedAt   time.Time      `json:"generated_at"`
	Stopped       bool           `json:"stopped"`
	Schedule      string         `json:"schedule"`
	MaxHold       string         `json:"max_hold"`
	MaxHoldMillis int64          `json:"max_hold_ms"`
	Stats         statsJSON      `json:"stats"`
	Endpoints     []endpointJSON `json:"endpoints"`
	LocksTotal    int            `json:"locks_total"`
	LocksShown    int            `json:"locks_shown"`
	LocksFastLane int            `json:"locks_fast_lane"`
	LocksRetrying int            `json:"locks_retrying"`
	Limit         int            `json:"limit"`
	MaxBytes      int            `json:"max_bytes"`
	Truncated     bool           `json:"truncated"` // locks were left out to stay within MaxBytes
	Locks         []lockView     `json:"locks"`

	// For the HTML page only.
	EndpointsDown int    `json:"-"`
	JSONLink      string `json:"-"`
	MaxLimit      int    `json:"-"`
}

// pageFormat is one format of the page: how to write it, and how many
// bytes one lock adds to it.
type pageFormat struct {
	write    func(io.Writer, *pageData) error
	lockSize func(*lockView) (int, error)
}

var (
	jsonFormat = pageFormat{
		write: func(w io.Writer, p *pageData) error {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			return enc.Encode(p)
		},
		// A lock is an element of "locks", two levels in: "\n    " before
		// it, a comma after it.
		lockSize: func(v *lockView) (int, error) {
			b, err := json.MarshalIndent(v, "    ", "  ")
			return len(b) + len("\n    ,"), err
		},
	}
	htmlFormat = pageFormat{
		write: func(w io.Writer, p *pageData) error { return pageTemplate.Execute(w, p) },
		// A lock is its row, then a newline.
		lockSize: func(v *lockView) (int, error) {
			var n byteCount
			err := pageTemplate.ExecuteTemplate(&n, "lock", v)
			return int(n) + 1, err
		},
	}
)

// pageSlack is what the page may take beyond its measure without locks
// and what its locks add: the locks table's head, the digits of
// locks_shown, the end of the locks list.
const pageSlack = 1 << 10

// byteCount is an [io.Writer] that counts what is written to it.
type byteCount int

func (n *byteCount) Write(b []byte) (int, error) {
	*n += byteCount(len(b))
	return len(b), nil
}

// stopped reports whether Stop has begun.
func (w *Watchdog) stopped() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stopping
}

// page takes the snapshot the debug page shows at now, in format f: at
// most limit locks, and no more than fit in [HandlerMaxBytes].
func (w *Watchdog) page(now time.Time, limit int, f pageFormat) (*pageData, error) {
	st := w.Stats()
	snaps := w.lockSnaps()
	p := w.pageHead(st, now, limit, len(snaps))
	// Locks are shown endpoint by endpoint in the order of the endpoints
	// table (clients in Watch order), then by key; only those shown are
	// formatted.
	rank := make(map[string]int, len(st.Endpoints))
	for i, ep := range st.Endpoints {
		if _, ok := rank[ep.Endpoint]; !ok {
			rank[ep.Endpoint] = i
		}
		p.Endpoints = append(p.Endpoints, endpointOf(ep, now))
		if ep.Down {
			p.EndpointsDown++
		}
	}
	for _, s := range snaps {
		if s.flags&table.Queued != 0 {
			p.LocksFastLane++
		}
		if s.flags&table.Retry != 0 {
			p.LocksRetrying++
		}
	}
	order := lockOrder(snaps, rank, len(st.Endpoints))
	// The page without its locks, saying all it may say of them, is
	// measured; locks are added while what they add fits in the rest.
	p.Locks, p.Truncated = []lockView{}, true
	var base byteCount
	if err := f.write(&base, p); err != nil {
		return nil, err
	}
	room := HandlerMaxBytes - pageSlack - int(base)
	p.Truncated = false
	p.Locks = make([]lockView, 0, min(limit, len(snaps)))
	for _, i := range order[:min(limit, len(snaps))] {
		v := w.lockViewOf(&snaps[i], now)
		v.ObtainedAt, v.ConfirmedAt = v.ObtainedAt.UTC(), v.ConfirmedAt.UTC()
		n, err := f.lockSize(&v)
		if err != nil {
			return nil, err
		}
		if n > room {
			p.Truncated = true
			break
		}
		room -= n
		p.Locks = append(p.Locks, v)
	}
	p.LocksShown = len(p.Locks)
	return p, nil
}

// pageHead is the page without its endpoints and locks.
func (w *Watchdog) pageHead(st Stats, now time.Time, limit, locks int) *pageData {
	return &pageData{
		GeneratedAt:   now.UTC(),
		Stopped:       w.stopped(),
		Schedule:      w.o.schedule,
		MaxHold:       w.o.maxHold.String(),
		MaxHoldMillis: w.o.maxHold.Milliseconds(),
		Stats:         statsOf(st),
		Endpoints:     make([]endpointJSON, 0, len(st.Endpoints)),
		LocksTotal:    locks,
		Limit:         limit,
		MaxBytes:      HandlerMaxBytes,
		JSONLink:      "?" + url.Values{"format": {"json"}, "limit": {strconv.Itoa(limit)}}.Encode(),
		MaxLimit:      MaxHandlerLimit,
	}
}

// statsOf is st on the page, without its endpoints.
func statsOf(st Stats) statsJSON {
	return statsJSON{
		Ticks:           st.Ticks,
		Sweeps:          st.Sweeps,
		Renewals:        st.Renewals,
		Lost:            st.Lost,
		Failures:        st.Failures,
		RenewErrors:     st.RenewErrors,
		DeadlinesMissed: st.DeadlinesMissed,
		Hedges:          st.Hedges,
		SpareCalls:      st.SpareCalls,
		Unconfirmed:     st.Unconfirmed,
		ToldLate:        st.ToldLate,
		CallbackPanics:  st.CallbackPanics,
		Lateness:        roundDuration(st.Lateness).String(),
		LatenessMillis:  float64(st.Lateness.Microseconds()) / 1000,
		Losses: lossesJSON{
			Gone:        st.Losses.Gone,
			Taken:       st.Losses.Taken,
			Unreachable: st.Losses.Unreachable,
			MaxHold:     st.Losses.MaxHold,
			Quorum:      st.Losses.Quorum,
		},
		Tracked:  st.Tracked,
		FastLane: st.FastLane,
	}
}

// lockOrder returns the indices of snaps in the order the page shows
// them: by the rank of their endpoint (unknown ones after the others),
// then by key. Indices are sorted, not the snapshots (large), with a total
// order: clients in Watch order break the ties.
func lockOrder(snaps []lockSnap, rank map[string]int, unknown int) []int32 {
	ranks := make([]int32, len(snaps))
	order := make([]int32, len(snaps))
	for i, s := range snaps {
		r, ok := rank[s.endpoint]
		if !ok {
			r = unknown
		}
		ranks[i], order[i] = int32(r), int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int {
		return cmp.Or(
			cmp.Compare(ranks[a], ranks[b]),
			strings.Compare(snaps[a].endpoint, snaps[b].endpoint),
			strings.Compare(snaps[a].key, snaps[b].key),
			cmp.Compare(a, b),
		)
	})
	return order
}

// endpointOf is ep on the page at now.
func endpointOf(ep EndpointStats, now time.Time) endpointJSON {
	e := endpointJSON{
		Endpoint:        ep.Endpoint,
		Down:            ep.Down,
		Renewed:         ep.Renewed,
		Failed:          ep.Failed,
		Lost:            ep.Lost,
		Sweeps:          ep.Sweeps,
		FastLane:        ep.FastLane,
		Missed:          ep.Missed,
		Hedges:          ep.Hedges,
		SpareCalls:      ep.SpareCalls,
		LastSweep:       roundDuration(ep.LastSweep).String(),
		LastSweepMillis: float64(ep.LastSweep.Microseconds()) / 1000,
	}
	if ep.LastError != nil {
		e.LastError = ep.LastError.Error()
		if k := keyViewOf(e.LastError); k.Truncated {
			e.LastError = fmt.Sprintf("%s... (truncated: %d bytes)", k.shown, k.Bytes)
		}
	}
	if !ep.LastOK.IsZero() {
		t := ep.LastOK.UTC()
		ago := now.Sub(ep.LastOK)
		e.LastOK, e.LastOKAgo, e.LastOKAgoMillis = &t, roundDuration(ago).String(), ago.Milliseconds()
	}
	return e
}

// roundDuration rounds d for people: to the millisecond from a second up,
// to the microsecond below.
func roundDuration(d time.Duration) time.Duration {
	if d >= time.Second || d <= -time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Microsecond)
}

//go:embed handler.html
var pageHTML string

var pageTemplate = template.Must(template.New("page").Parse(pageHTML))
