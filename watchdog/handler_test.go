package watchdog_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	rsgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/goredsync"
	"github.com/lockwatch/lockwatch/internal/testkit/memconn"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// multiScript obtains a lock over several keys: every key gets ARGV[1]
// for ARGV[2] ms, or none does.
const multiScript = `for _, k in ipairs(KEYS) do if redis.call("exists", k) == 1 then return 0 end end
for _, k in ipairs(KEYS) do redis.call("set", k, ARGV[1], "px", ARGV[2]) end return 1`

// multiAdapter treats an EVAL of multiScript as the obtain of one lock
// over several keys (Action.Keys), as redislock's ObtainMulti is.
type multiAdapter struct{}

func (multiAdapter) Name() string                { return "multi" }
func (multiAdapter) Probe(context.Context) error { return nil }

func (multiAdapter) Classify(c registry.Command) registry.Action {
	if c.Name != "eval" || len(c.Args) < 3 || c.Err != nil {
		return registry.Action{}
	}
	if src, _ := c.Args[1].(string); src != multiScript {
		return registry.Action{}
	}
	n, _ := c.Args[2].(int)
	if n < 2 || len(c.Args) != 5+n {
		return registry.Action{}
	}
	if !c.Pending {
		if ok, _ := c.Reply.(int64); ok != 1 {
			return registry.Action{}
		}
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i], _ = c.Args[3+i].(string)
	}
	val, _ := c.Args[3+n].(string)
	ms, _ := c.Args[4+n].(int64)
	return registry.Action{Op: registry.OpObtain, Key: keys[0], Keys: keys, Value: val, TTL: time.Duration(ms) * time.Millisecond}
}

// pageEnv is n miniredis servers, each with a watched client named by an
// address of its own (10.0.0.1:6379, 10.0.0.2:6379...: never dialled).
type pageEnv struct {
	ms   []*miniredis.Miniredis
	rdbs []*redis.Client
	reg  *registry.Registry
}

func newPageEnv(t *testing.T, n int, adapters ...registry.Adapter) *pageEnv {
	t.Helper()
	e := &pageEnv{reg: registry.New(adapters...)}
	for i := range n {
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true)
		c := redis.NewClient(&redis.Options{Addr: endpointAddr(i), Dialer: memconn.Dialer(m), MaxRetries: -1})
		if err := e.reg.Watch(c); err != nil {
			t.Fatal(err)
		}
		e.ms, e.rdbs = append(e.ms, m), append(e.rdbs, c)
		t.Cleanup(func() { _ = c.Close(); m.Close() })
	}
	return e
}

func endpointAddr(i int) string { return fmt.Sprintf("10.0.0.%d:6379", i+1) }

func (e *pageEnv) obtain(t *testing.T, i int, key, val string, ttl time.Duration) {
	t.Helper()
	if ok, err := e.rdbs[i].SetNX(context.Background(), key, val, ttl).Result(); !ok || err != nil {
		t.Fatalf("SET %s NX on server %d = %v, %v", key, i, ok, err)
	}
}

func (e *pageEnv) obtainMulti(t *testing.T, i int, keys []string, val string, ttl time.Duration) {
	t.Helper()
	n, err := e.rdbs[i].Eval(context.Background(), multiScript, keys, val, ttl.Milliseconds()).Int()
	if n != 1 || err != nil {
		t.Fatalf("obtain %v on server %d = %d, %v", keys, i, n, err)
	}
}

// serve sends one request to h; header holds name, value pairs.
func serve(h http.Handler, method, target string, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

// page is the JSON page, as Handler documents it.
type page struct {
	GeneratedAt   time.Time `json:"generated_at"`
	Stopped       bool      `json:"stopped"`
	Schedule      string    `json:"schedule"`
	MaxHold       string    `json:"max_hold"`
	MaxHoldMillis int64     `json:"max_hold_ms"`
	Stats         struct {
		Ticks, Sweeps, Renewals, Lost, Failures int64
		RenewErrors                             int64 `json:"renew_errors"`
		Tracked                                 int
		FastLane                                int `json:"fast_lane"`
		Losses                                  struct {
			Gone, Taken, Unreachable, Quorum int64
			MaxHold                          int64 `json:"max_hold"`
		}
	} `json:"stats"`
	Endpoints []struct {
		Endpoint        string
		Down            bool
		Renewed         int64
		Failed          int64
		Lost            int64
		Sweeps          int64
		FastLane        int        `json:"fast_lane"`
		LastError       string     `json:"last_error"`
		LastOK          *time.Time `json:"last_ok"`
		LastOKAgo       string     `json:"last_ok_ago"`
		LastOKAgoMillis int64      `json:"last_ok_ago_ms"`
		LastSweep       string     `json:"last_sweep"`
		LastSweepMillis float64    `json:"last_sweep_ms"`
	} `json:"endpoints"`
	LocksTotal    int        `json:"locks_total"`
	LocksShown    int        `json:"locks_shown"`
	LocksFastLane int        `json:"locks_fast_lane"`
	LocksRetrying int        `json:"locks_retrying"`
	Limit         int        `json:"limit"`
	MaxBytes      int        `json:"max_bytes"`
	Truncated     bool       `json:"truncated"`
	Locks         []pageLock `json:"locks"`
}

type pageLock struct {
	Key                string
	KeyB64             string `json:"key_b64"`
	KeyBytes           int    `json:"key_bytes"`
	KeyTruncated       bool   `json:"key_truncated"`
	Keys               []string
	KeysB64            []string `json:"keys_b64"`
	KeysBytes          []int    `json:"keys_bytes"`
	KeysTotal          int      `json:"keys_total"`
	KeysTruncated      bool     `json:"keys_truncated"`
	Endpoint           string
	Source             string
	TTL                string
	TTLMillis          int64     `json:"ttl_ms"`
	HeldFor            string    `json:"held_for"`
	HeldForMillis      int64     `json:"held_for_ms"`
	ObtainedAt         time.Time `json:"obtained_at"`
	ConfirmedAt        time.Time `json:"confirmed_at"`
	ConfirmedAgo       string    `json:"confirmed_ago"`
	ConfirmedAgoMillis int64     `json:"confirmed_ago_ms"`
	Renewals           int64
	FastLane           bool `json:"fast_lane"`
	Retrying           bool
	InFlight           bool `json:"in_flight"`
	CopiesHeld         int  `json:"copies_held"`
	Quorum             int
	Servers            int
}

func getJSON(t *testing.T, h http.Handler, target string, header ...string) (page, string) {
	t.Helper()
	rec := serve(h, http.MethodGet, target, header...)
	body := rec.Body.String()
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s %v = %d %q, want 200 application/json; body:\n%s", target, header, rec.Code, rec.Header().Get("Content-Type"), body)
	}
	var p page
	dec := json.NewDecoder(strings.NewReader(body))
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("GET %s: decoding: %v\n%s", target, err, body)
	}
	return p, body
}

func getHTML(t *testing.T, h http.Handler, target string, header ...string) string {
	t.Helper()
	rec := serve(h, http.MethodGet, target, header...)
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET %s %v = %d %q, want 200 text/html", target, header, rec.Code, rec.Header().Get("Content-Type"))
	}
	if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("GET %s: Content-Security-Policy %q, want default-src 'none'", target, csp)
	}
	return rec.Body.String()
}

func lockByKey(p page, key string) (pageLock, bool) {
	for _, l := range p.Locks {
		if l.Key == key {
			return l, true
		}
	}
	return pageLock{}, false
}

// The page shows each lock (single-key, multi-key, in the fast lane or
// not) with its endpoint and source, in both formats, ordered by endpoint
// then key; an endpoint that fails is shown down with its error, its lock
// retrying; no lock value appears anywhere.
func TestHandlerShowsLocks(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newPageEnv(t, 2, setAdapter{}, multiAdapter{})
		wd := attach(t, e.reg)
		h := wd.Handler()
		values := []string{"tok-a9f3e1", "tok-b7c2d4", "tok-c5e6f8", "tok-d3a1b2"}
		e.obtain(t, 0, "job:2", values[0], time.Minute)
		e.obtain(t, 0, "job:1", values[1], 2*time.Second) // fast lane: a third of 2s < the 10s schedule
		e.obtainMulti(t, 0, []string{"batch:a", "batch:b", "batch:c"}, values[2], time.Minute)
		e.obtain(t, 1, "report:<b>7</b>", values[3], 2*time.Second)
		time.Sleep(11 * time.Second) // a tick and a few fast-lane renewals

		p, body := getJSON(t, h, "/debug/lockwatch?format=json")
		html := getHTML(t, h, "/debug/lockwatch")
		for _, v := range values {
			if strings.Contains(body, v) || strings.Contains(html, v) {
				t.Errorf("the page shows the value %q of a lock", v)
			}
		}
		var order []string
		for _, l := range p.Locks {
			order = append(order, l.Endpoint+" "+l.Key)
		}
		want := []string{
			"10.0.0.1:6379 batch:a", "10.0.0.1:6379 job:1", "10.0.0.1:6379 job:2",
			"10.0.0.2:6379 report:<b>7</b>",
		}
		if !slices.Equal(order, want) {
			t.Errorf("locks = %q, want %q (by endpoint, then key)", order, want)
		}
		if p.LocksTotal != 4 || p.LocksShown != 4 || p.Limit != watchdog.DefaultHandlerLimit || p.Stopped {
			t.Errorf("locks_total, locks_shown, limit, stopped = %d, %d, %d, %v; want 4, 4, %d, false",
				p.LocksTotal, p.LocksShown, p.Limit, p.Stopped, watchdog.DefaultHandlerLimit)
		}
		for _, tc := range []struct {
			key      string
			source   string
			ttl      string
			fast     bool
			keys     []string
			renewals bool
		}{
			{"job:1", "test", "2s", true, nil, true},
			{"job:2", "test", "1m0s", false, nil, true},
			{"batch:a", "multi", "1m0s", false, []string{"batch:a", "batch:b", "batch:c"}, true},
			{"report:<b>7</b>", "test", "2s", true, nil, true},
		} {
			l, ok := lockByKey(p, tc.key)
			if !ok {
				t.Errorf("lock %s not on the page", tc.key)
				continue
			}
			if l.Source != tc.source || l.TTL != tc.ttl || l.FastLane != tc.fast || !slices.Equal(l.Keys, tc.keys) ||
				(l.Renewals > 0) != tc.renewals || l.Retrying || l.Servers != 0 {
				t.Errorf("lock %s = %+v, want source %s, ttl %s, fast lane %v, keys %q, renewed", tc.key, l, tc.source, tc.ttl, tc.fast, tc.keys)
			}
			if l.HeldFor != "11s" || l.HeldForMillis != 11000 || l.ConfirmedAgoMillis > l.TTLMillis/3 {
				t.Errorf("lock %s held for %s (%d ms), confirmed %d ms ago; want 11s and less than a third of %d ms",
					tc.key, l.HeldFor, l.HeldForMillis, l.ConfirmedAgoMillis, l.TTLMillis)
			}
		}
		st := wd.Stats()
		if p.Stats.Renewals != st.Renewals || p.Stats.Tracked != 4 || p.Stats.Ticks != 1 || len(p.Endpoints) != 2 {
			t.Errorf("stats = %+v with %d endpoints, want renewals %d, 4 tracked, 1 tick, 2 endpoints", p.Stats, len(p.Endpoints), st.Renewals)
		}
		for i, ep := range p.Endpoints {
			if ep.Endpoint != endpointAddr(i) || ep.Down || ep.LastError != "" || ep.LastOK == nil || ep.Renewed == 0 {
				t.Errorf("endpoint %d = %+v, want %s up, renewing", i, ep, endpointAddr(i))
			}
		}
		for _, want := range []string{
			"4 locks tracked on 2 endpoints", "10.0.0.1:6379", "10.0.0.2:6379",
			"job:1", "job:2", "batch:a<br>batch:b<br>batch:c", "(3 keys)", "fast lane",
			"report:&lt;b&gt;7&lt;/b&gt;", `href="?format=json&amp;limit=1000"`,
		} {
			if !strings.Contains(html, want) {
				t.Errorf("the HTML page does not contain %q", want)
			}
		}
		if strings.Contains(html, "<b>7</b>") || strings.Contains(html, `class="bad">down`) {
			t.Errorf("the HTML page shows a key unescaped, or an endpoint down:\n%s", html)
		}

		// The second server fails: its endpoint is down with its error,
		// its lock retrying.
		e.ms[1].SetError("LOADING Redis is loading the dataset in memory")
		time.Sleep(time.Second)
		p, body = getJSON(t, h, "/debug/lockwatch", "Accept", "application/json")
		html = getHTML(t, h, "/debug/lockwatch")
		e.ms[1].SetError("")
		if ep := p.Endpoints[1]; !ep.Down || !strings.Contains(ep.LastError, "LOADING") || ep.Failed == 0 || p.Endpoints[0].Down {
			t.Errorf("endpoints = %+v, want the second down with its LOADING error, the first up", p.Endpoints)
		}
		if l, _ := lockByKey(p, "report:<b>7</b>"); !l.Retrying || p.LocksRetrying != 1 {
			t.Errorf("lock on the failing server = %+v (%d retrying), want it retrying", l, p.LocksRetrying)
		}
		for _, want := range []string{"(<span class=\"bad\">1 down</span>)", `<tr class="down"><td class="k">10.0.0.2:6379</td><td><span class="bad">down</span>`, "LOADING Redis is loading", "retrying"} {
			if !strings.Contains(html, want) {
				t.Errorf("the HTML page with a failing endpoint does not contain %q", want)
			}
		}
		for _, v := range values {
			if strings.Contains(body, v) || strings.Contains(html, v) {
				t.Errorf("the page shows the value %q of a lock", v)
			}
		}
		wd.Stop()
	})
}

// The JSON object has the documented fields, no more, no fewer.
func TestHandlerJSONSchema(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newPageEnv(t, 1, setAdapter{})
		wd := attach(t, e.reg)
		e.obtain(t, 0, "job", "tok-1", time.Minute)
		if err := wd.Sweep(context.Background()); err != nil {
			t.Fatal(err)
		}
		_, body := getJSON(t, wd.Handler(), "/?format=json")
		var m map[string]any
		if err := json.Unmarshal([]byte(body), &m); err != nil {
			t.Fatal(err)
		}
		keysOf := func(v any) []string {
			o, _ := v.(map[string]any)
			var ks []string
			for k := range o {
				ks = append(ks, k)
			}
			slices.Sort(ks)
			return ks
		}
		first := func(v any) any {
			if a, _ := v.([]any); len(a) > 0 {
				return a[0]
			}
			return nil
		}
		stats, _ := m["stats"].(map[string]any)
		for _, tc := range []struct {
			name string
			v    any
			want string
		}{
			{"page", m, "endpoints generated_at limit locks locks_fast_lane locks_retrying locks_shown locks_total max_bytes max_hold max_hold_ms schedule stats stopped truncated"},
			{"stats", stats, "callback_panics deadlines_missed failures fast_lane hedges lateness lateness_ms losses lost renew_errors renewals spare_calls sweeps ticks told_late tracked unconfirmed"},
			{"stats.losses", stats["losses"], "gone max_hold quorum taken unreachable"},
			{"endpoint", first(m["endpoints"]), "down endpoint failed fast_lane hedges last_error last_ok last_ok_ago last_ok_ago_ms last_sweep last_sweep_ms lost missed renewed spare_calls sweeps"},
			{"lock", first(m["locks"]), "confirmed_ago confirmed_ago_ms confirmed_at endpoint fast_lane held_for held_for_ms in_flight key obtained_at renewals retrying source ttl ttl_ms"},
		} {
			want := strings.Fields(tc.want)
			if got := keysOf(tc.v); !slices.Equal(got, want) {
				t.Errorf("%s fields = %q, want %q", tc.name, got, want)
			}
		}
	})
}

// A redsync mutex over three servers shows on each as a copy with the
// number of copies held, the quorum and the servers.
func TestHandlerRedlock(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newPageEnv(t, 3, goredsync.New())
		wd := attach(t, e.reg)
		var pools []rsredis.Pool
		for _, c := range e.rdbs {
			pools = append(pools, rsgoredis.NewPool(c))
		}
		mutex := redsync.New(pools...).NewMutex("invoice:7", redsync.WithExpiry(time.Minute), redsync.WithTries(1))
		if err := mutex.Lock(); err != nil {
			t.Fatal(err)
		}
		p, body := getJSON(t, wd.Handler(), "/?format=json")
		html := getHTML(t, wd.Handler(), "/")
		if strings.Contains(body, mutex.Value()) || strings.Contains(html, mutex.Value()) {
			t.Errorf("the page shows the mutex's value %q", mutex.Value())
		}
		if len(p.Locks) != 3 {
			t.Fatalf("locks = %+v, want 3 copies", p.Locks)
		}
		for i, l := range p.Locks {
			if l.Key != "invoice:7" || l.Endpoint != endpointAddr(i) || l.Source != "redsync" || l.CopiesHeld != 3 || l.Quorum != 2 || l.Servers != 3 {
				t.Errorf("copy %d = %+v, want invoice:7 on %s from redsync, 3 of 3 held, quorum 2", i, l, endpointAddr(i))
			}
		}
		if n := strings.Count(html, "3 of 3 held, quorum 2"); n != 3 {
			t.Errorf("the HTML page says %q %d times, want 3", "3 of 3 held, quorum 2", n)
		}
		if _, err := mutex.Unlock(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestHandlerMethods(t *testing.T) {
	reg := registry.New(setAdapter{})
	wd := attach(t, reg)
	h := wd.Handler()
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions} {
		rec := serve(h, m, "/debug/lockwatch")
		if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "GET, HEAD" {
			t.Errorf("%s = %d, Allow %q; want 405, Allow GET, HEAD", m, rec.Code, rec.Header().Get("Allow"))
		}
	}
	get := serve(h, http.MethodGet, "/debug/lockwatch")
	head := serve(h, http.MethodHead, "/debug/lockwatch")
	if head.Code != http.StatusOK || head.Body.Len() != 0 || head.Header().Get("Content-Type") != get.Header().Get("Content-Type") ||
		head.Header().Get("Content-Length") == "" {
		t.Errorf("HEAD = %d, %d bytes, headers %v; want 200, no body, GET's headers", head.Code, head.Body.Len(), head.Header())
	}
}

func TestHandlerNegotiation(t *testing.T) {
	reg := registry.New(setAdapter{})
	wd := attach(t, reg)
	h := wd.Handler()
	const browser = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"
	for _, tc := range []struct {
		target, accept string
		json           bool
	}{
		{"/", "", false},
		{"/", browser, false},
		{"/", "*/*", false},
		{"/", "application/json", true},
		{"/", "application/*", true},
		{"/", "text/html;q=0.5, application/json", true},
		{"/", "application/json;q=0.5, text/html", false},
		{"/", "application/json, text/html", false},
		{"/", "image/png", false},
		{"/?format=json", browser, true},
		{"/?format=json", "", true},
		{"/?format=html", "application/json", false},
		{"/?limit=5", "application/json", true},
	} {
		rec := serve(h, http.MethodGet, tc.target, "Accept", tc.accept)
		ct := rec.Header().Get("Content-Type")
		want := map[bool]string{false: "text/html; charset=utf-8", true: "application/json"}[tc.json]
		if rec.Code != http.StatusOK || ct != want || rec.Header().Get("Vary") != "Accept" {
			t.Errorf("GET %s, Accept %q = %d %q (Vary %q), want 200 %q (Vary Accept)", tc.target, tc.accept, rec.Code, ct, rec.Header().Get("Vary"), want)
		}
	}
}

// The page lists at most limit locks, by endpoint then key, and says how
// many there are.
func TestHandlerLimit(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newPageEnv(t, 1, setAdapter{})
		wd := attach(t, e.reg)
		for i := range 25 {
			e.obtain(t, 0, fmt.Sprintf("k%02d", i), "tok", time.Minute)
		}
		for _, tc := range []struct {
			query string
			shown int
		}{
			{"", 25},
			{"limit=10", 10},
			{"limit=0", 0},
			{"limit=25", 25},
			{fmt.Sprintf("limit=%d", watchdog.MaxHandlerLimit), 25},
		} {
			p, body := getJSON(t, wd.Handler(), "/?format=json&"+tc.query)
			var keys []string
			for _, l := range p.Locks {
				keys = append(keys, l.Key)
			}
			var want []string
			for i := range tc.shown {
				want = append(want, fmt.Sprintf("k%02d", i))
			}
			if p.LocksTotal != 25 || p.LocksShown != tc.shown || !slices.Equal(keys, want) {
				t.Errorf("?%s: locks_total %d, locks_shown %d, keys %q; want 25, %d, %q", tc.query, p.LocksTotal, p.LocksShown, keys, tc.shown, want)
			}
			if tc.shown == 0 && !strings.Contains(body, `"locks": []`) {
				t.Errorf("?%s: locks is not an empty list:\n%s", tc.query, body)
			}
		}
		html := getHTML(t, wd.Handler(), "/?limit=10")
		if !strings.Contains(html, "Showing the first 10 of 25 locks") || strings.Contains(html, "k10") ||
			!strings.Contains(html, `href="?format=json&amp;limit=10"`) {
			t.Errorf("?limit=10: the HTML page does not say it shows 10 of 25, or shows k10, or its JSON link drops the limit")
		}
		if html := getHTML(t, wd.Handler(), "/"); strings.Contains(html, "Showing the first") {
			t.Errorf("the HTML page with every lock shown says some are not")
		}
	})
}

func TestHandlerBadQuery(t *testing.T) {
	reg := registry.New(setAdapter{})
	wd := attach(t, reg)
	h := wd.Handler()
	for _, tc := range []struct {
		query, accept, want string
	}{
		{"limit=-1", "", `limit="-1"`},
		{"limit=abc", "", `limit="abc"`},
		{"limit=1.5", "", `limit="1.5"`},
		{"limit=99999999999999999999", "", "whole number"},
		{fmt.Sprintf("limit=%d", watchdog.MaxHandlerLimit+1), "", fmt.Sprintf("limit=%d: at most %d", watchdog.MaxHandlerLimit+1, watchdog.MaxHandlerLimit)},
		{"limit=1000000", "application/json", fmt.Sprintf("at most %d", watchdog.MaxHandlerLimit)},
		{"limit=", "", `limit=""`},
		{"limit=1&limit=2", "", "limit is given 2 times"},
		{"format=xml", "", `format="xml": want json or html`},
		{"format=json&format=html", "", "format is given 2 times"},
		{"limit=%zz", "", "bad query string"},
		{"format=json&limit=x", "", `limit="x"`},
		{"limit=x", "application/json", `limit="x"`},
	} {
		rec := serve(h, http.MethodGet, "/?"+tc.query, "Accept", tc.accept)
		body := rec.Body.String()
		wantJSON := strings.Contains(tc.query, "format=json&limit") || tc.accept == "application/json"
		if ct := rec.Header().Get("Content-Type"); (ct == "application/json") != wantJSON {
			t.Errorf("GET ?%s (Accept %q): error as %q, want JSON %v", tc.query, tc.accept, ct, wantJSON)
		}
		msg := strings.TrimSpace(body)
		if wantJSON {
			var e struct{ Error string }
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Errorf("GET ?%s: JSON error %q: %v", tc.query, body, err)
			}
			msg = e.Error
		}
		if rec.Code != http.StatusBadRequest || !strings.Contains(msg, tc.want) {
			t.Errorf("GET ?%s = %d %q, want 400 mentioning %q", tc.query, rec.Code, msg, tc.want)
		}
	}
	if rec := serve(h, http.MethodGet, "/?other=1&limit=3"); rec.Code != http.StatusOK {
		t.Errorf("GET with an unknown parameter = %d, want 200 (ignored)", rec.Code)
	}
}

// After Stop the page still answers, with the counters Stop left and the
// locks the registry still tracks.
func TestHandlerAfterStop(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newPageEnv(t, 1, setAdapter{})
		wd := attach(t, e.reg)
		h := wd.Handler()
		e.obtain(t, 0, "job", "tok-stop", time.Minute)
		if err := wd.Sweep(context.Background()); err != nil {
			t.Fatal(err)
		}
		wd.Stop()
		st := wd.Stats()
		time.Sleep(30 * time.Second)
		p, body := getJSON(t, h, "/?format=json")
		if !p.Stopped || p.Stats.Renewals != st.Renewals || p.Stats.Sweeps != st.Sweeps || p.LocksTotal != 1 || len(p.Endpoints) != 1 {
			t.Errorf("after Stop: stopped %v, stats %+v, %d locks, %d endpoints; want stopped, renewals %d, sweeps %d, 1 lock, 1 endpoint",
				p.Stopped, p.Stats, p.LocksTotal, len(p.Endpoints), st.Renewals, st.Sweeps)
		}
		if l, _ := lockByKey(p, "job"); l.Renewals != 1 || l.FastLane || l.HeldFor != "30s" {
			t.Errorf("after Stop: lock %+v, want 1 renewal, not in the fast lane, held 30s", l)
		}
		html := getHTML(t, h, "/")
		if !strings.Contains(html, "Stopped.") || !strings.Contains(html, "job") {
			t.Errorf("after Stop: the HTML page does not say it is stopped, or does not list the lock")
		}
		if strings.Contains(body, "tok-stop") || strings.Contains(html, "tok-stop") {
			t.Error("after Stop: the page shows the lock's value")
		}
	})
}

// exactKey is l's key as the JSON page documents it: key_b64 decoded when
// present, key otherwise.
func exactKey(t testing.TB, l pageLock) string {
	t.Helper()
	if l.KeyB64 == "" {
		return l.Key
	}
	b, err := base64.StdEncoding.DecodeString(l.KeyB64)
	if err != nil {
		t.Errorf("lock %q: key_b64 %q: %v", l.Key, l.KeyB64, err)
	}
	return string(b)
}

// keyCell matches a lock's row in the HTML page; group 1 is its key cell.
var keyCell = regexp.MustCompile(`<tr><td class="k">[^<]*</td><td class="k">(.*?)</td>`)

// Keys that are not UTF-8, or hold a character that does not print, are
// exact in the JSON (key_b64, keys_b64 beside a readable, Go-escaped key)
// and shown escaped and marked in the HTML: no two keys look alike, and
// the HTML page is UTF-8, as it says.
func TestHandlerBinaryKeys(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newPageEnv(t, 1, setAdapter{}, multiAdapter{})
		wd := attach(t, e.reg)
		h := wd.Handler()
		b64 := base64.StdEncoding.EncodeToString
		tests := []struct {
			key, wantKey string
			escaped      bool
		}{
			{"bin:\x00\xff:end", `bin:\x00\xff:end`, true},
			{"bin:\x00\xfe:end", `bin:\x00\xfe:end`, true},
			{`bin:\x00\xff:end`, `bin:\x00\xff:end`, false}, // UTF-8 text that reads like the first
			{"nul:\x00", `nul:\x00`, true},                  // html/template shows NUL as U+FFFD...
			{"nul:\ufffd", "nul:\ufffd", false},             // ...which this key holds
			{"rtl:\u202eevil", `rtl:\u202eevil`, true},      // a bidi override turns the rest around
			{"plain:é日本", "plain:é日本", false},
		}
		for _, tc := range tests {
			e.obtain(t, 0, tc.key, "tok", time.Minute)
		}
		multi := []string{"m:\xff", "m:\xfe", "m:ok"}
		e.obtainMulti(t, 0, multi, "tok-m", time.Minute)

		p, _ := getJSON(t, h, "/?format=json")
		byExact := map[string][]pageLock{}
		for _, l := range p.Locks {
			k := exactKey(t, l)
			byExact[k] = append(byExact[k], l)
		}
		for _, tc := range tests {
			ls := byExact[tc.key]
			if len(ls) != 1 {
				t.Errorf("JSON: %d locks with the exact key %q, want 1", len(ls), tc.key)
				continue
			}
			l := ls[0]
			if l.Key != tc.wantKey || (l.KeyB64 != "") != tc.escaped || (tc.escaped && l.KeyB64 != b64([]byte(tc.key))) {
				t.Errorf("JSON: lock %q = key %q, key_b64 %q; want key %q, key_b64 %v", tc.key, l.Key, l.KeyB64, tc.wantKey, tc.escaped)
			}
			if l.KeyTruncated || l.KeyBytes != 0 {
				t.Errorf("JSON: lock %q: key_truncated %v, key_bytes %d; want neither", tc.key, l.KeyTruncated, l.KeyBytes)
			}
		}
		if ls := byExact[multi[0]]; len(ls) != 1 {
			t.Errorf("JSON: %d locks with the exact key %q, want 1", len(ls), multi[0])
		} else {
			l := ls[0]
			wantKeys := []string{`m:\xff`, `m:\xfe`, "m:ok"}
			wantB64 := []string{b64([]byte(multi[0])), b64([]byte(multi[1])), b64([]byte(multi[2]))}
			if !slices.Equal(l.Keys, wantKeys) || !slices.Equal(l.KeysB64, wantB64) || l.KeysTotal != 3 || l.KeysTruncated || l.KeysBytes != nil {
				t.Errorf("JSON: lock over %q = keys %q, keys_b64 %q, keys_total %d, keys_truncated %v, keys_bytes %v; want %q, %q, 3, false, none",
					multi, l.Keys, l.KeysB64, l.KeysTotal, l.KeysTruncated, l.KeysBytes, wantKeys, wantB64)
			}
		}

		html := getHTML(t, h, "/")
		if !utf8.ValidString(html) {
			t.Errorf("HTML: the page is not UTF-8 (its charset): a browser shows every byte that is not as U+FFFD")
		}
		if n := strings.Count(html, "\ufffd"); n != 1 {
			t.Errorf("HTML: U+FFFD appears %d times, want once (the key nul:\\ufffd)", n)
		}
		var cells []string
		for _, m := range keyCell.FindAllStringSubmatch(html, -1) {
			cells = append(cells, m[1])
		}
		if len(cells) != len(tests)+1 {
			t.Fatalf("HTML: %d lock rows, want %d", len(cells), len(tests)+1)
		}
		seen := map[string]bool{}
		for _, c := range cells {
			if seen[c] {
				t.Errorf("HTML: two locks show the same key cell %q", c)
			}
			seen[c] = true
		}
		for _, tc := range tests {
			want := template.HTMLEscapeString(tc.wantKey)
			n := 0
			for _, c := range cells {
				if strings.Contains(c, want) && strings.Contains(c, ">escaped<") == tc.escaped {
					n++
				}
			}
			if n != 1 {
				t.Errorf("HTML: %d key cells show %q (marked escaped: %v), want 1; cells %q", n, want, tc.escaped, cells)
			}
		}
		if !strings.Contains(html, `m:\xff`) || !strings.Contains(html, `m:\xfe`) {
			t.Errorf("HTML: the keys of the lock over %q are not shown escaped", multi)
		}
	})
}

// A key is cut to its first HandlerMaxKeyBytes bytes (its length shown,
// marked truncated) and a lock over many keys lists the first
// HandlerMaxKeys: 100 keys of 256 KiB no longer make a 26 MB page.
func TestHandlerLongKeys(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newPageEnv(t, 1, setAdapter{}, multiAdapter{})
		wd := attach(t, e.reg)
		h := wd.Handler()
		const n, size = 100, 256 << 10
		long := func(i int) string {
			k := fmt.Sprintf("long:%03d:", i)
			return k + strings.Repeat("é", (size-len(k))/2) + strings.Repeat("x", (size-len(k))%2)
		}
		for i := range n {
			e.obtain(t, 0, long(i), "tok", time.Minute)
		}
		bin := "long:bin:" + strings.Repeat("\xff", size-9)
		e.obtain(t, 0, bin, "tok", time.Minute)
		var many []string
		for i := range 40 {
			many = append(many, fmt.Sprintf("many:%02d:", i)+strings.Repeat("y", 200))
		}
		e.obtainMulti(t, 0, many, "tok-m", time.Minute)
		wide := []string{"wide:a", "wide:b:" + strings.Repeat("z", 3000), "wide:c"}
		e.obtainMulti(t, 0, wide, "tok-w", time.Minute)

		p, body := getJSON(t, h, "/?format=json")
		if len(body) > watchdog.HandlerMaxBytes || p.Truncated || p.LocksShown != n+3 || p.LocksTotal != n+3 || p.MaxBytes != watchdog.HandlerMaxBytes {
			t.Fatalf("JSON: %d bytes, truncated %v, %d of %d locks shown, max_bytes %d; want at most %d bytes, not truncated, %d of %d, max_bytes %d",
				len(body), p.Truncated, p.LocksShown, p.LocksTotal, p.MaxBytes, watchdog.HandlerMaxBytes, n+3, n+3, watchdog.HandlerMaxBytes)
		}
		for i, l := range p.Locks[:n] {
			full := long(i)
			if !l.KeyTruncated || l.KeyBytes != size || len(l.Key) > watchdog.HandlerMaxKeyBytes || len(l.Key) < watchdog.HandlerMaxKeyBytes-3 ||
				!strings.HasPrefix(full, l.Key) || !utf8.ValidString(l.Key) || l.KeyB64 != "" {
				t.Errorf("JSON: lock %d = key of %d bytes (truncated %v, key_bytes %d, key_b64 %d bytes); want a UTF-8 prefix of %d to %d bytes, truncated, key_bytes %d, no key_b64",
					i, len(l.Key), l.KeyTruncated, l.KeyBytes, len(l.KeyB64), watchdog.HandlerMaxKeyBytes-3, watchdog.HandlerMaxKeyBytes, size)
			}
		}
		if l, ok := lockByKey(p, "long:bin:"+strings.Repeat(`\xff`, watchdog.HandlerMaxKeyBytes-9)); !ok {
			t.Errorf("JSON: no lock with the escaped first %d bytes of the binary key", watchdog.HandlerMaxKeyBytes)
		} else if k := exactKey(t, l); !l.KeyTruncated || l.KeyBytes != size || k != bin[:watchdog.HandlerMaxKeyBytes] {
			t.Errorf("JSON: binary lock: truncated %v, key_bytes %d, key_b64 of %d bytes; want truncated, %d, its first %d bytes",
				l.KeyTruncated, l.KeyBytes, len(k), size, watchdog.HandlerMaxKeyBytes)
		}
		if l, ok := lockByKey(p, many[0]); !ok {
			t.Errorf("JSON: no lock over %d keys", len(many))
		} else if !slices.Equal(l.Keys, many[:watchdog.HandlerMaxKeys]) || l.KeysTotal != len(many) || !l.KeysTruncated || l.KeysBytes != nil || l.KeyTruncated {
			t.Errorf("JSON: lock over %d keys lists %d, keys_total %d, keys_truncated %v, keys_bytes %v, key_truncated %v; want the first %d, %d, true, none, false",
				len(many), len(l.Keys), l.KeysTotal, l.KeysTruncated, l.KeysBytes, l.KeyTruncated, watchdog.HandlerMaxKeys, len(many))
		}
		if l, ok := lockByKey(p, wide[0]); !ok {
			t.Errorf("JSON: no lock over %q", wide[0])
		} else if want := []string{wide[0], wide[1][:watchdog.HandlerMaxKeyBytes], wide[2]}; !slices.Equal(l.Keys, want) || l.KeysTotal != 3 ||
			!l.KeysTruncated || !slices.Equal(l.KeysBytes, []int{len(wide[0]), len(wide[1]), len(wide[2])}) || l.KeysB64 != nil {
			t.Errorf("JSON: lock over %q = keys of %d bytes, keys_total %d, keys_truncated %v, keys_bytes %v, keys_b64 %q; want the second cut to %d bytes, 3, true, their lengths, none",
				wide[0], len(strings.Join(l.Keys, "")), l.KeysTotal, l.KeysTruncated, l.KeysBytes, l.KeysB64, watchdog.HandlerMaxKeyBytes)
		}

		html := getHTML(t, h, "/")
		if len(html) > watchdog.HandlerMaxBytes {
			t.Errorf("HTML: %d bytes, want at most %d", len(html), watchdog.HandlerMaxBytes)
		}
		if got, want := strings.Count(html, fmt.Sprintf(">truncated: %d bytes<", size)), n+1; got != want {
			t.Errorf("HTML: %d keys marked truncated with their length, want %d", got, want)
		}
		if want := fmt.Sprintf(">truncated: %d bytes<", len(wide[1])); !strings.Contains(html, want) {
			t.Errorf("HTML: the long key of the lock over %q is not marked %q", wide[0], want)
		}
		if want := fmt.Sprintf("(%d keys, the first %d shown)", len(many), watchdog.HandlerMaxKeys); !strings.Contains(html, want) {
			t.Errorf("HTML: the lock over %d keys does not say %q", len(many), want)
		}
	})
}

// The page stops at HandlerMaxBytes, in either format, and says it was
// cut; the locks it shows are the first, in order.
func TestHandlerByteBudget(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newPageEnv(t, 1, setAdapter{})
		wd := attach(t, e.reg)
		h := wd.Handler()
		const n = 600 // a key of 1 KiB shown as 4 KiB (\xff) and 1.4 KiB of base64
		key := func(i int) string {
			return fmt.Sprintf("b%04d:", i) + strings.Repeat("\xff", watchdog.HandlerMaxKeyBytes-6)
		}
		for i := range n {
			e.obtain(t, 0, key(i), "tok", time.Minute)
		}
		p, body := getJSON(t, h, fmt.Sprintf("/?format=json&limit=%d", watchdog.MaxHandlerLimit))
		if len(body) > watchdog.HandlerMaxBytes || len(body) < watchdog.HandlerMaxBytes-16<<10 {
			t.Errorf("JSON: %d bytes, want %d at most, and not 16 KiB less", len(body), watchdog.HandlerMaxBytes)
		}
		if !p.Truncated || p.LocksTotal != n || p.LocksShown != len(p.Locks) || p.LocksShown >= n || p.LocksShown == 0 {
			t.Errorf("JSON: truncated %v, %d of %d locks shown (%d listed); want truncated, some of %d", p.Truncated, p.LocksShown, p.LocksTotal, len(p.Locks), n)
		}
		for i, l := range p.Locks {
			if k := exactKey(t, l); k != key(i) {
				t.Errorf("JSON: lock %d = %q, want %q", i, k, key(i))
				break
			}
		}

		html := getHTML(t, h, fmt.Sprintf("/?limit=%d", watchdog.MaxHandlerLimit))
		rows := len(keyCell.FindAllStringIndex(html, -1))
		if len(html) > watchdog.HandlerMaxBytes || len(html) < watchdog.HandlerMaxBytes-16<<10 || rows == 0 || rows >= n {
			t.Errorf("HTML: %d bytes, %d locks; want at most %d bytes, and not 16 KiB less, some of %d locks", len(html), rows, watchdog.HandlerMaxBytes, n)
		}
		want := fmt.Sprintf("Showing the first %d of %d locks (by endpoint, then key). The page was cut to stay within %d bytes.", rows, n, watchdog.HandlerMaxBytes)
		if !strings.Contains(html, want) {
			t.Errorf("HTML: the page does not say %q", want)
		}

		// Under the budget, nothing is cut.
		p, _ = getJSON(t, h, "/?format=json&limit=100")
		if p.Truncated || p.LocksShown != 100 {
			t.Errorf("JSON ?limit=100: truncated %v, %d shown; want 100, not truncated", p.Truncated, p.LocksShown)
		}
		if html := getHTML(t, h, "/?limit=100"); strings.Contains(html, "was cut") {
			t.Errorf("HTML ?limit=100: the page says it was cut")
		}
	})
}

// An endpoint's last error is cut to HandlerMaxKeyBytes too, and says so.
func TestHandlerLongError(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newPageEnv(t, 1, setAdapter{})
		wd := attach(t, e.reg)
		e.obtain(t, 0, "job", "tok", time.Minute)
		msg := "ERR " + strings.Repeat("x", 3000)
		e.ms[0].SetError(msg)
		_ = wd.Sweep(context.Background())
		p, _ := getJSON(t, wd.Handler(), "/?format=json")
		e.ms[0].SetError("")
		got := p.Endpoints[0].LastError
		suffix := fmt.Sprintf("... (truncated: %d bytes)", len(msg))
		if !strings.HasPrefix(got, msg[:watchdog.HandlerMaxKeyBytes]) || !strings.HasSuffix(got, suffix) ||
			len(got) != watchdog.HandlerMaxKeyBytes+len(suffix) {
			t.Errorf("last_error of %d bytes = %d bytes ending %q; want its first %d bytes, then %q",
				len(msg), len(got), got[max(0, len(got)-40):], watchdog.HandlerMaxKeyBytes, suffix)
		}
	})
}
