package watchdog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	rsgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/goredsync"
	"github.com/lockwatch/lockwatch/internal/memconn"
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
	Locks         []pageLock `json:"locks"`
}

type pageLock struct {
	Key                string
	Keys               []string
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
	synctest.Test(t, func(t *testing.T) {
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
	synctest.Test(t, func(t *testing.T) {
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
			{"page", m, "endpoints generated_at limit locks locks_fast_lane locks_retrying locks_shown locks_total max_hold max_hold_ms schedule stats stopped"},
			{"stats", stats, "failures fast_lane losses lost renew_errors renewals sweeps ticks tracked"},
			{"stats.losses", stats["losses"], "gone max_hold quorum taken unreachable"},
			{"endpoint", first(m["endpoints"]), "down endpoint failed fast_lane last_error last_ok last_ok_ago last_ok_ago_ms last_sweep last_sweep_ms lost renewed sweeps"},
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
	synctest.Test(t, func(t *testing.T) {
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
	synctest.Test(t, func(t *testing.T) {
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
			{"limit=1000000", 25},
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
	synctest.Test(t, func(t *testing.T) {
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
