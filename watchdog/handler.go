package watchdog

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The bounds of the page of [Watchdog.Handler].
const (
	// DefaultHandlerLimit is how many locks the page shows at most when
	// the request does not say (?limit=N).
	DefaultHandlerLimit = 1000

	// MaxHandlerLimit is the largest ?limit=N the page accepts; a larger
	// one is answered with 400 Bad Request.
	MaxHandlerLimit = 10000

	// HandlerMaxBytes is how large the page grows at most, in either
	// format: it lists locks (within the limit) while they fit, and says
	// when it left some out ("truncated": true). Only its endpoints
	// table, one row per Redis server, is not cut.
	HandlerMaxBytes = 2 << 20

	// HandlerMaxKeyBytes is how much of a key the page shows: a longer
	// key is cut (where a UTF-8 character starts, up to three bytes
	// sooner) and marked truncated, with its length.
	HandlerMaxKeyBytes = 1024

	// HandlerMaxKeys is how many keys of a lock over several keys the page
	// lists: the first, in the lock's order.
	HandlerMaxKeys = 32
)

// Handler returns a read-only debug page of the watchdog: its counters
// ([Watchdog.Stats]), the state of each endpoint (renewed, failed, lost,
// in the fast lane, down or not, the last error, when it last answered, how
// long its last sweep took) and the locks the registry tracks, endpoint by
// endpoint then key by key: key (the keys of a lock over several keys),
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
//	            "renew_errors", "deadlines_missed", "hedges", "spare_calls", "unconfirmed", "told_late",
//	            "callback_panics", "tracked", "fast_lane": int,
//	            "lateness": duration, "lateness_ms": float,
//	            "losses": {"gone", "taken", "unreachable", "max_hold", "quorum": int}},
//	  "endpoints": [{"endpoint": string, "down": bool,
//	                 "renewed", "failed", "lost", "sweeps", "fast_lane",
//	                 "missed", "hedges", "spare_calls": int,
//	                 "last_error": string ("" when none),
//	                 "last_ok": time or null, "last_ok_ago": duration, "last_ok_ago_ms": int,
//	                 "last_sweep": duration, "last_sweep_ms": float}],
//	  "locks_total", "locks_shown", "locks_fast_lane", "locks_retrying", "limit": int,
//	  "max_bytes": int, "truncated": bool,
//	  "locks": [{"key": string, "key_b64": string (only when the key is escaped),
//	             "key_bytes": int, "key_truncated": true (only when the key is cut),
//	             "keys": [string], "keys_total": int (only for a lock over several keys),
//	             "keys_b64": [string] (only when one of keys is escaped),
//	             "keys_bytes": [int] (only when one of keys is cut),
//	             "keys_truncated": true (only when one of keys is cut, or keys is not all),
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
// A key is exact. It is shown as it is when it is UTF-8 and every character
// in it prints; otherwise it is shown escaped, as [strconv.Quote] escapes
// it without the quotes (bin:\x00\xff:end for the bytes "bin:\x00\xff:end"),
// marked "escaped" in the HTML, and key_b64 holds its bytes in standard
// base64: the key is key_b64 decoded when present, key otherwise. (An
// escaped key may read like another key's text; key_b64 tells them apart.)
// keys_b64, when present, holds the bytes of every key in keys, in order.
//
// The page is bounded in locks and in bytes, so that a process tracking a
// hundred thousand locks, or locks with long keys, does not serve a page of
// that size by accident:
//   - It lists at most ?limit=N locks (default [DefaultHandlerLimit]; 0
//     lists none; above [MaxHandlerLimit] the request is answered with 400
//     Bad Request naming the cap, rather than silently shown less than it
//     asked for).
//   - It shows at most the first [HandlerMaxKeyBytes] bytes of a key, with
//     key_bytes, the key's length, and key_truncated (in the HTML:
//     "truncated: N bytes"); keys_bytes and keys_truncated do the same for
//     keys, which lists at most the first [HandlerMaxKeys] of the lock's
//     keys_total keys. key_b64 is then the bytes of the part shown.
//   - It shows at most the first [HandlerMaxKeyBytes] bytes of an
//     endpoint's last_error, followed by "... (truncated: N bytes)".
//   - It stops at [HandlerMaxBytes] (max_bytes): the locks that would take
//     it further are left out, "truncated" is true, and the HTML page says
//     it was cut.
//
// locks_total says how many locks there are, locks_shown how many the page
// lists: the first, by endpoint then key. A query value that does not
// parse is answered with 400 Bad Request, a method other than GET and HEAD
// with 405.
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
	f := htmlFormat
	if q.json {
		f = jsonFormat
	}
	var body bytes.Buffer
	p, err := h.w.page(time.Now(), q.limit, f)
	if err == nil {
		err = f.write(&body, p)
	}
	if q.json {
		rw.Header().Set("Content-Type", "application/json")
	} else {
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
			return q, fmt.Errorf("watchdog: limit=%q: want a whole number of locks from 0 to %d (default %d)", vs[0], MaxHandlerLimit, DefaultHandlerLimit)
		}
		if n > MaxHandlerLimit {
			return q, fmt.Errorf("watchdog: limit=%d: at most %d locks (MaxHandlerLimit); the page also stops at %d bytes (HandlerMaxBytes)", n, MaxHandlerLimit, HandlerMaxBytes)
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
