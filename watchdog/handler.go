package watchdog

import (
	"bytes"
	"cmp"
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lockwatch/lockwatch/internal/table"
)

// DefaultHandlerLimit is how many locks the page of [Watchdog.Handler]
// shows when the request does not say (?limit=N).
const DefaultHandlerLimit = 1000

// Handler returns a read-only debug page of the watchdog: its counters
// ([Watchdog.Stats]), the state of each endpoint (renewed, failed, lost,
// in the fast lane, down or not, the last error, when it last answered, how
// long its last sweep took) and the locks the registry tracks, endpoint by
// endpoint then key by key: key (every key of a lock over several keys),
// endpoint, source library, TTL, how long it has been held, when Redis last
// confirmed it, renewals, whether it is in the fast lane, being retried or
// being renewed now, and, for a redsync mutex over several servers, how many
// copies are held, its quorum and its servers. A lock's value, the holder's
// token, is never shown.
//
// The page is HTML for a browser (no scripts, no external assets) and JSON
// with ?format=json or an Accept header that prefers application/json
// (?format=html forces HTML). The JSON object is:
//
//	{
//	  "generated_at": time, "stopped": bool,
//	  "schedule": string, "max_hold": duration, "max_hold_ms": int,
//	  "stats": {"ticks", "sweeps", "renewals", "lost", "failures",
//	            "renew_errors", "tracked", "fast_lane": int,
//	            "losses": {"gone", "taken", "unreachable", "max_hold", "quorum": int}},
//	  "endpoints": [{"endpoint": string, "down": bool,
//	                 "renewed", "failed", "lost", "sweeps", "fast_lane": int,
//	                 "last_error": string ("" when none),
//	                 "last_ok": time or null, "last_ok_ago": duration, "last_ok_ago_ms": int,
//	                 "last_sweep": duration, "last_sweep_ms": float}],
//	  "locks_total", "locks_shown", "locks_fast_lane", "locks_retrying", "limit": int,
//	  "locks": [{"key": string, "keys": [string] (only for a lock over several keys),
//	             "endpoint", "source": string,
//	             "ttl": duration, "ttl_ms": int,
//	             "held_for": duration, "held_for_ms": int, "obtained_at": time,
//	             "confirmed_at": time, "confirmed_ago": duration, "confirmed_ago_ms": int,
//	             "renewals": int, "fast_lane", "retrying", "in_flight": bool,
//	             "copies_held", "quorum", "servers": int (only for a mutex over several servers)}]
//	}
//
// where a time is RFC 3339 in UTC and a duration is Go's notation ("1.5s").
// Fields may be added; none is renamed or removed.
//
// The page lists at most ?limit=N locks (default [DefaultHandlerLimit]; 0
// lists none), so that a process tracking a hundred thousand locks does not
// serve a page of that size by accident; locks_total says how many there
// are. A query value that does not parse is answered with 400 Bad Request,
// a method other than GET and HEAD with 405.
//
// The handler reads a snapshot: it holds no lock of the watchdog or the
// registry for longer than it takes to copy a few thousand entries, and
// sends nothing to Redis. After [Watchdog.Stop] it still answers, with the
// counters as Stop left them (and "stopped": true).
//
// Mount it next to net/http/pprof, on the internal mux that serves
// /debug/pprof:
//
//	mux.Handle("/debug/lockwatch", wd.Handler())
//
// or, when pprof is on [http.DefaultServeMux]:
//
//	http.Handle("/debug/lockwatch", wd.Handler())
//
// Never expose it publicly: it reveals lock keys, which often name
// customers or jobs, and the addresses of Redis servers.
//
// Handler is safe for concurrent use, and so is the handler it returns.
func (w *Watchdog) Handler() http.Handler { return &handler{w: w} }

// handler serves the debug page of one watchdog.
type handler struct{ w *Watchdog }

var _ http.Handler = (*handler)(nil)

// statsJSON is [Stats] on the page, without its endpoints.
type statsJSON struct {
	Ticks       int64      `json:"ticks"`
	Sweeps      int64      `json:"sweeps"`
	Renewals    int64      `json:"renewals"`
	Lost        int64      `json:"lost"`
	Failures    int64      `json:"failures"`
	RenewErrors int64      `json:"renew_errors"`
	Losses      lossesJSON `json:"losses"`
	Tracked     int        `json:"tracked"`
	FastLane    int        `json:"fast_lane"`
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
	Locks         []lockView     `json:"locks"`

	// For the HTML page only.
	EndpointsDown int    `json:"-"`
	JSONLink      string `json:"-"`
}

// query is what a request asks of the page.
type query struct {
	json  bool
	limit int
}

func (h *handler) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		rw.Header().Set("Allow", "GET, HEAD")
		httpError(rw, false, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed: the lockwatch page is read-only (GET, HEAD)", r.Method))
		return
	}
	q, err := parseQuery(r)
	if err == nil && h.w == nil {
		httpError(rw, q.json, http.StatusServiceUnavailable, ErrNilWatchdog.Error())
		return
	}
	if err != nil {
		httpError(rw, q.json, http.StatusBadRequest, err.Error())
		return
	}
	p := h.w.page(time.Now(), q.limit)
	var body bytes.Buffer
	if q.json {
		enc := json.NewEncoder(&body)
		enc.SetIndent("", "  ")
		err = enc.Encode(p)
		rw.Header().Set("Content-Type", "application/json")
	} else {
		p.JSONLink = "?" + url.Values{"format": {"json"}, "limit": {strconv.Itoa(q.limit)}}.Encode()
		err = pageTemplate.Execute(&body, p)
		rw.Header().Set("Content-Type", "text/html; charset=utf-8")
		// No script, no frame, nothing fetched: the inline style only.
		rw.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'")
	}
	if err != nil {
		rw.Header().Del("Content-Type")
		rw.Header().Del("Content-Security-Policy")
		httpError(rw, q.json, http.StatusInternalServerError, "watchdog: rendering the page: "+err.Error())
		return
	}
	hdr := rw.Header()
	hdr.Set("Vary", "Accept")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Content-Length", strconv.Itoa(body.Len()))
	rw.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = rw.Write(body.Bytes())
	}
}

// httpError answers with status and msg, as JSON ({"error": msg}) when the
// request asked for JSON, as text otherwise.
func httpError(rw http.ResponseWriter, asJSON bool, status int, msg string) {
	hdr := rw.Header()
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Content-Type-Options", "nosniff")
	if asJSON {
		b, _ := json.Marshal(struct {
			Error string `json:"error"`
		}{msg})
		hdr.Set("Content-Type", "application/json")
		rw.WriteHeader(status)
		_, _ = rw.Write(append(b, '\n'))
		return
	}
	hdr.Set("Content-Type", "text/plain; charset=utf-8")
	rw.WriteHeader(status)
	_, _ = fmt.Fprintln(rw, msg)
}

// parseQuery reads format and limit; other parameters are ignored. The
// query it returns says whether to answer in JSON even with an error, as
// far as the request made that clear.
func parseQuery(r *http.Request) (query, error) {
	q := query{json: prefersJSON(r.Header.Values("Accept")), limit: DefaultHandlerLimit}
	vals, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return q, fmt.Errorf("watchdog: bad query string: %v", err)
	}
	if vs := vals["format"]; len(vs) > 0 {
		if len(vs) > 1 {
			return q, fmt.Errorf("watchdog: format is given %d times; give it once", len(vs))
		}
		switch vs[0] {
		case "json":
			q.json = true
		case "html":
			q.json = false
		default:
			return q, fmt.Errorf("watchdog: format=%q: want json or html", vs[0])
		}
	}
	if vs := vals["limit"]; len(vs) > 0 {
		if len(vs) > 1 {
			return q, fmt.Errorf("watchdog: limit is given %d times; give it once", len(vs))
		}
		n, err := strconv.Atoi(vs[0])
		if err != nil || n < 0 {
			return q, fmt.Errorf("watchdog: limit=%q: want a whole number of locks, 0 or more (default %d)", vs[0], DefaultHandlerLimit)
		}
		q.limit = n
	}
	return q, nil
}

// prefersJSON reads Accept headers: true when application/json is
// acceptable and preferred to text/html. A browser's Accept, */*, none or
// a tie is HTML.
func prefersJSON(accept []string) bool {
	jsonQ, htmlQ := acceptQ(accept, "application", "json"), acceptQ(accept, "text", "html")
	return jsonQ > htmlQ
}

// acceptQ returns the quality the Accept headers give the media type
// typ/sub: that of the most specific range that matches it (0 when none
// does).
func acceptQ(accept []string, typ, sub string) float64 {
	best, q := -1, 0.0
	for _, h := range accept {
		for _, part := range strings.Split(h, ",") {
			params := strings.Split(part, ";")
			mt := strings.ToLower(strings.TrimSpace(params[0]))
			rt, rs, ok := strings.Cut(mt, "/")
			if !ok {
				continue
			}
			spec := -1
			switch {
			case rt == typ && rs == sub:
				spec = 2
			case rt == typ && rs == "*":
				spec = 1
			case rt == "*" && rs == "*":
				spec = 0
			}
			if spec <= best {
				continue
			}
			pq := 1.0
			for _, p := range params[1:] {
				k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
				if strings.EqualFold(strings.TrimSpace(k), "q") {
					if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && f >= 0 && f <= 1 {
						pq = f
					}
				}
			}
			best, q = spec, pq
		}
	}
	return q
}

// stopped reports whether Stop has begun.
func (w *Watchdog) stopped() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stopping
}

// page takes the snapshot the debug page shows at now, with at most limit
// locks.
func (w *Watchdog) page(now time.Time, limit int) *pageData {
	st := w.Stats()
	snaps := w.lockSnaps()
	p := &pageData{
		GeneratedAt:   now.UTC(),
		Stopped:       w.stopped(),
		Schedule:      w.o.schedule,
		MaxHold:       w.o.maxHold.String(),
		MaxHoldMillis: w.o.maxHold.Milliseconds(),
		Stats: statsJSON{
			Ticks:       st.Ticks,
			Sweeps:      st.Sweeps,
			Renewals:    st.Renewals,
			Lost:        st.Lost,
			Failures:    st.Failures,
			RenewErrors: st.RenewErrors,
			Losses: lossesJSON{
				Gone:        st.Losses.Gone,
				Taken:       st.Losses.Taken,
				Unreachable: st.Losses.Unreachable,
				MaxHold:     st.Losses.MaxHold,
				Quorum:      st.Losses.Quorum,
			},
			Tracked:  st.Tracked,
			FastLane: st.FastLane,
		},
		Endpoints:  make([]endpointJSON, 0, len(st.Endpoints)),
		LocksTotal: len(snaps),
		Limit:      limit,
	}
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
	// Indices are sorted, not the snapshots (large), with a total order:
	// clients in Watch order break the ties.
	ranks := make([]int32, len(snaps))
	order := make([]int32, len(snaps))
	for i, s := range snaps {
		r, ok := rank[s.endpoint]
		if !ok {
			r = len(st.Endpoints)
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
	p.Locks = make([]lockView, min(limit, len(snaps)))
	for i := range p.Locks {
		v := w.lockViewOf(&snaps[order[i]], now)
		v.ObtainedAt, v.ConfirmedAt = v.ObtainedAt.UTC(), v.ConfirmedAt.UTC()
		p.Locks[i] = v
	}
	p.LocksShown = len(p.Locks)
	return p
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
		LastSweep:       roundDuration(ep.LastSweep).String(),
		LastSweepMillis: float64(ep.LastSweep.Microseconds()) / 1000,
	}
	if ep.LastError != nil {
		e.LastError = ep.LastError.Error()
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
