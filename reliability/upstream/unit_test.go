package upstream_test

import (
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/lockwatch/lockwatch/internal/testkit/versions"
)

// The runner's own logic, on made-up input: these run in every go test.

func TestExpectedDifferencesFileParses(t *testing.T) {
	exps, err := parseExpectations(strings.NewReader(expectedDifferences), watchedRunNames())
	if err != nil {
		t.Fatal(err)
	}
	if len(exps) == 0 {
		t.Fatal("expected_differences.txt lists nothing")
	}
	libs := map[string]bool{}
	for _, s := range suites {
		libs[s.lib+"@"+s.version] = true
	}
	for _, e := range exps {
		for _, v := range e.versions {
			if !libs[e.lib+"@"+v] {
				t.Errorf("line %d: %s@%s is not a suite the runner runs", e.line, e.lib, v)
			}
		}
		if len(e.reason) < 40 {
			t.Errorf("line %d: reason %q is too short to explain anything", e.line, e.reason)
		}
	}
}

func TestParseExpectations(t *testing.T) {
	runs := []string{"with", "fast"}
	good := `# comment
redislock@v1,v2 TestA: pass -> fail [with,fast]
	first line of the reason,
	second line.

redsync@v4 TestB/sub: fail -> pass [fast] intermittent
  reason B
`
	exps, err := parseExpectations(strings.NewReader(good), runs)
	if err != nil {
		t.Fatal(err)
	}
	if len(exps) != 2 {
		t.Fatalf("%d entries, want 2", len(exps))
	}
	a, b := exps[0], exps[1]
	if a.lib != "redislock" || !slices.Equal(a.versions, []string{"v1", "v2"}) || a.test != "TestA" ||
		a.without != "pass" || a.with != "fail" || !slices.Equal(a.runs, runs) || a.intermittent ||
		a.reason != "first line of the reason, second line." || a.line != 2 {
		t.Errorf("first entry: %+v", a)
	}
	if b.test != "TestB/sub" || !b.intermittent || b.reason != "reason B" || !b.appliesTo("redsync", "v4", "fast") || b.appliesTo("redsync", "v4", "with") {
		t.Errorf("second entry: %+v", b)
	}

	for name, bad := range map[string]string{
		"no reason":       "redislock@v1 TestA: pass -> fail [with]\n",
		"no difference":   "redislock@v1 TestA: pass -> pass [with]\n\treason\n",
		"unknown result":  "redislock@v1 TestA: pass -> broken [with]\n\treason\n",
		"unknown run":     "redislock@v1 TestA: pass -> fail [slow]\n\treason\n",
		"no runs":         "redislock@v1 TestA: pass -> fail\n\treason\n",
		"reason first":    "\treason\nredislock@v1 TestA: pass -> fail [with]\n\treason\n",
		"listed twice":    "redislock@v1,v2 TestA: pass -> fail [with]\n\treason\nredislock@v2 TestA: pass -> skip [with,fast]\n\treason\n",
		"unknown keyword": "redislock@v1 TestA: pass -> fail [with] flaky\n\treason\n",
	} {
		if _, err := parseExpectations(strings.NewReader(bad), runs); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestDifferencesAndVerdict(t *testing.T) {
	without := map[string]string{
		"TestSame": "pass", "TestParent": "pass", "TestParent/a": "pass", "TestParent/b": "pass",
		"TestOwn": "pass", "TestOwn/a": "pass", "TestGone": "pass",
	}
	with := map[string]string{
		"TestSame": "pass", "TestParent": "fail", "TestParent/a": "fail", "TestParent/b": "pass",
		"TestOwn": "fail", "TestOwn/a": "pass", "TestNew": "skip",
	}
	diffs := differences(without, with)
	want := []difference{
		{"TestGone", "pass", "none"},
		{"TestNew", "none", "skip"},
		{"TestOwn", "pass", "fail"}, // fails with its subtests passing: its own difference
		{"TestParent/a", "pass", "fail"},
	}
	if !slices.Equal(diffs, want) {
		t.Fatalf("differences = %v, want %v", diffs, want)
	}
	exps := []expectation{
		{lib: "l", versions: []string{"v1"}, test: "TestParent/a", without: "pass", with: "fail", runs: []string{"with"}},
		{lib: "l", versions: []string{"v1"}, test: "TestNew", without: "none", with: "skip", runs: []string{"fast"}},
		{lib: "l", versions: []string{"v1"}, test: "TestNeverDiffers", without: "pass", with: "fail", runs: []string{"with"}},
		{lib: "l", versions: []string{"v2"}, test: "TestGone", without: "pass", with: "none", runs: []string{"with"}},
		{lib: "l", versions: []string{"v1"}, test: "TestOwn", without: "pass", with: "skip", runs: []string{"with"}},
	}
	unlisted, missing, met := verdict(diffs, exps, "l", "v1", "with")
	if got := names(unlisted); !slices.Equal(got, []string{"TestGone", "TestNew", "TestOwn"}) {
		t.Errorf("unlisted = %v", got)
	}
	if len(missing) != 2 || missing[0].test != "TestNeverDiffers" || missing[1].test != "TestOwn" {
		t.Errorf("missing = %v", missing)
	}
	if len(met) != 1 || met[0].test != "TestParent/a" {
		t.Errorf("met = %v", met)
	}
}

// TestVerdictSwapped: a listed difference the other way round (the
// unwatched run gave lockwatch's listed result on its own, the watched run
// the unwatched one) is not unlisted: the listed one stays missing, for
// occur and baseAgain to try again alone. Any other result with lockwatch
// stays unlisted.
func TestVerdictSwapped(t *testing.T) {
	exps := []expectation{
		{lib: "l", versions: []string{"v1"}, test: "TestExpired", without: "pass", with: "fail", runs: []string{"fast"}},
	}
	for _, c := range []struct {
		d        difference
		unlisted bool
	}{
		{difference{"TestExpired", "fail", "pass"}, false},
		{difference{"TestExpired", "fail", "skip"}, true},
		{difference{"TestExpired", "none", "pass"}, true},
		{difference{"TestOther", "fail", "pass"}, true},
	} {
		unlisted, missing, met := verdict([]difference{c.d}, exps, "l", "v1", "fast")
		if got := len(unlisted) == 1; got != c.unlisted {
			t.Errorf("%v: unlisted %v, want %v", c.d, unlisted, c.unlisted)
		}
		if len(missing) != 1 || len(met) != 0 {
			t.Errorf("%v: missing %v, met %v; want the listed difference missing", c.d, missing, met)
		}
	}
}

func names(diffs []difference) []string {
	var out []string
	for _, d := range diffs {
		out = append(out, d.test)
	}
	return out
}

func TestExactRun(t *testing.T) {
	pat := exactRun("TestMutexExtend/goredis_v9")
	if pat != "^TestMutexExtend$/^goredis_v9$" {
		t.Errorf("exactRun = %q", pat)
	}
	if got := exactRun("Example"); !regexp.MustCompile(got).MatchString("Example") || regexp.MustCompile(got).MatchString("Example_two") {
		t.Errorf("exactRun(Example) = %q", got)
	}
}

func TestParseEvents(t *testing.T) {
	stream := `{"Action":"start","Package":"p"}
{"Action":"run","Test":"TestA"}
{"Action":"output","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"pass","Test":"TestA"}
{"Action":"run","Test":"TestA"}
{"Action":"fail","Test":"TestA"}
{"Action":"run","Test":"TestB"}
{"Action":"run","Test":"TestB/x"}
{"Action":"skip","Test":"TestB/x"}
{"Action":"output","Output":"panic: test timed out\n"}
not json
{"Action":"fail","Package":"p"}
`
	r := parseEvents(strings.NewReader(stream))
	if r.results["TestA"] != "fail" || r.results["TestB"] != "none" || r.results["TestB/x"] != "skip" || len(r.results) != 3 {
		t.Errorf("results = %v", r.results)
	}
	if r.tally["TestA"]["pass"] != 1 || r.tally["TestA"]["fail"] != 1 {
		t.Errorf("tally = %v", r.tally)
	}
	if len(r.output["TestA"]) != 1 || strings.Join(r.other, "") != "panic: test timed out\nnot json\n" {
		t.Errorf("output = %q, other = %q", r.output, r.other)
	}
}

// fakeUpstream is a made-up test package in the shape of redsync's: test
// files of the package itself, a map of cases, servers started with a port.
const fakeUpstream = `package fake

import (
	"strconv"
	"testing"
	"time"

	goredislib_v9 "github.com/redis/go-redis/v9"
	other "example.com/otherclient"
	"example.com/tempredis"
)

var servers []*tempredis.Server

// testRunner starts the servers.
func testRunner(m *testing.M) int {
	for i := range 4 {
		s, _ := tempredis.Start(tempredis.Config{
			"port": strconv.Itoa(51200 + i),
		})
		servers = append(servers, s)
	}
	return m.Run()
}

func makeCases(n int) map[string]int {
	return map[string]int{
		"other":      newMockPoolsOther(n),
		"goredis_v9": newMockPoolsGoredisV9(n),
	}
}

// newMockPoolsOther makes clients of another library.
func newMockPoolsOther(n int) int {
	_ = other.NewClient()
	return n
}

func newMockPoolsGoredisV9(n int) int {
	c := goredislib_v9.NewClient(&goredislib_v9.Options{Network: "unix"})
	_ = c
	return n
}

func tryLock(n int) error { return nil }

func TestTryLock(t *testing.T) {
	for i := range 2 {
		err := tryLock(i + 1)
		for {
			if err == nil {
				break
			}

			time.Sleep(100 * time.Millisecond)
		}
	}
	err := tryLock(3)
	for {
		if err == nil {
			break
		}
		err = tryLock(4)
	}
}
`

const fakeExternal = `package fake_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestX(t *testing.T) {
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rc.Close()
	_ = redis.NewClient
}
`

func TestAdaptations(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("fake_test.go", fakeUpstream)
	write("ext_test.go", fakeExternal)
	p, err := parseTestPackage(dir)
	if err != nil {
		t.Fatal(err)
	}
	if p.name != "fake" {
		t.Errorf("package %q, want fake", p.name)
	}
	internal, external := p.rewriteNewClient()
	if internal != 1 || external != 1 {
		t.Errorf("rewrote %d internal and %d external calls, want 1 and 1 (a NewClient not called stays)", internal, external)
	}
	dropped, err := p.keepCases("makeCases", "goredis_v9")
	if err != nil || !slices.Equal(dropped, []string{"other"}) {
		t.Errorf("keepCases: dropped %v, %v", dropped, err)
	}
	if _, err := p.keepCases("makeCases", "rueidis"); err == nil {
		t.Error("keepCases of a case that is not there: no error")
	}
	n, err := p.dropConfigKey("testRunner", "tempredis.Config", "port")
	if err != nil || n != 1 {
		t.Errorf("dropConfigKey: %d, %v", n, err)
	}
	if n, err := p.retryInWaitLoop("TestTryLock"); err != nil || n != 1 {
		t.Errorf("retryInWaitLoop: changed %d loops, %v; want 1 (the other calls again already)", n, err)
	}
	if _, err := p.retryInWaitLoop("TestNoSuch"); err == nil {
		t.Error("retryInWaitLoop of a function that is not there: no error")
	}
	if funcs := p.dropUnusedFuncs("newMockPools"); !slices.Equal(funcs, []string{"newMockPoolsOther"}) {
		t.Errorf("dropUnusedFuncs removed %v", funcs)
	}
	if imports := p.pruneImports(); !slices.Equal(imports, []string{"strconv", "example.com/otherclient"}) {
		t.Errorf("pruneImports removed %v", imports)
	}
	if err := p.write(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "fake_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	src := string(got)
	if _, err := parser.ParseFile(token.NewFileSet(), "fake_test.go", got, 0); err != nil {
		t.Fatalf("adapted file does not parse: %v\n%s", err, src)
	}
	for _, want := range []string{
		"for range 4 {", "tempredis.Config{}", `"goredis_v9": newMockPoolsGoredisV9(n)`,
		"lockwatchNewClient(&goredislib_v9.Options{", "// testRunner starts the servers.",
		"err = tryLock(i + 1)",
	} {
		if !strings.Contains(src, want) {
			t.Errorf("adapted file lacks %q:\n%s", want, src)
		}
	}
	if strings.Contains(src, "err = tryLock(3)") || strings.Count(src, "err = tryLock(4)") != 1 {
		t.Errorf("adapted file changed a wait loop that calls again already:\n%s", src)
	}
	for _, gone := range []string{"newMockPoolsOther", "otherclient", "strconv", "51200", "makes clients of another library"} {
		if strings.Contains(src, gone) {
			t.Errorf("adapted file still has %q:\n%s", gone, src)
		}
	}
	ext, err := os.ReadFile(filepath.Join(dir, "ext_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(ext), "rc := lockwatchNewClient(&redis.Options{") || !strings.Contains(string(ext), "_ = redis.NewClient") {
		t.Errorf("adapted external file:\n%s", ext)
	}
}

func TestDefaultImportName(t *testing.T) {
	for path, want := range map[string]string{
		"github.com/redis/go-redis/v9":                      "redis",
		"github.com/go-redsync/redsync/v4/redis/goredis/v9": "goredis",
		"github.com/stvp/tempredis":                         "tempredis",
		"strconv":                                           "strconv",
		"gopkg.in/yaml.v3":                                  "v3",
	} {
		if got := defaultImportName(path); got != want {
			t.Errorf("defaultImportName(%q) = %q, want %q", path, got, want)
		}
	}
}

func TestTemplates(t *testing.T) {
	for _, internal := range []bool{false, true} {
		data := map[string]any{
			"Module": "example.com/m", "Version": "v1.2.3", "Package": "m", "ImportPath": "example.com/m",
			"Internal": internal, "NewClientFunc": newClientFunc,
			"ModeEnv": modeEnv, "ScheduleEnv": scheduleEnv, "DebugEnv": DebugEnv, "AddrEnv": addrEnv, "RefusedMarker": refusedMarker,
		}
		dir := t.TempDir()
		for name, tmpl := range map[string]string{"external_test.go": externalTmpl, "internal_test.go": internalTmpl} {
			path := filepath.Join(dir, name)
			writeTemplate(t, path, tmpl, data)
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			formatted, err := format.Source(src)
			if err != nil {
				t.Fatalf("%s (internal %v) is not Go: %v\n%s", name, internal, err, src)
			}
			if string(formatted) != string(src) {
				t.Errorf("%s (internal %v) is not gofmt-ed:\n%s", name, internal, src)
			}
			if strings.Contains(string(src), "{{") || strings.Contains(string(src), "<no value>") {
				t.Errorf("%s (internal %v) kept template text:\n%s", name, internal, src)
			}
		}
	}
}

func TestOwnResults(t *testing.T) {
	for _, c := range []struct {
		d             difference
		without, with map[string]int
		want          []string
	}{
		// lockwatch's: fails with it, never without.
		{difference{"T", "pass", "fail"}, map[string]int{"pass": 3}, map[string]int{"fail": 3}, []string{"fail"}},
		{difference{"T", "pass", "fail"}, map[string]int{"pass": 3}, map[string]int{"pass": 3}, []string{"fail"}},
		// The test fails without lockwatch too, on its own timing.
		{difference{"T", "pass", "fail"}, map[string]int{"pass": 2, "fail": 1}, map[string]int{"pass": 3}, nil},
		// The unwatched run was the odd one.
		{difference{"T", "fail", "pass"}, map[string]int{"pass": 3}, map[string]int{"pass": 3}, nil},
		// A hang with lockwatch, never without.
		{difference{"T", "fail", "pass"}, map[string]int{"pass": 2, "fail": 1}, map[string]int{"pass": 2, "none": 1}, []string{"none"}},
	} {
		if got := ownResults(c.d, c.without, c.with); !slices.Equal(got, c.want) {
			t.Errorf("ownResults(%v, %v, %v) = %v, want %v", c.d, c.without, c.with, got, c.want)
		}
	}
}

// The suites run on exactly the releases lockwatch is tested with: the
// minimum go.mod requires and the newest release .ci/newest.txt names, for
// each lock library.
func TestSuitesFollowTheVersionList(t *testing.T) {
	root := repoRoot(t)
	mins, err := versions.Minimums(root)
	if err != nil {
		t.Fatal(err)
	}
	newest, err := versions.Newest(root)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, s := range suites {
		got[s.module] = append(got[s.module], s.version)
	}
	for _, mod := range []string{"github.com/bsm/redislock", "github.com/go-redsync/redsync/v4"} {
		want := []string{mins[mod], newest[mod]}
		slices.Sort(want)
		want = slices.Compact(want)
		have := slices.Clone(got[mod])
		slices.Sort(have)
		if !slices.Equal(have, want) {
			t.Errorf("suites of %s run %v, want %v (go.mod's minimum and .ci/newest.txt's newest)", mod, have, want)
		}
	}
}

// A listed difference whose test fails without lockwatch too, each time
// it is tried again alone, is not judged when marked intermittent (the
// machine is too busy for it), and fails the suite otherwise; a result
// other than the two expected fails it either way.
func TestBaseVerdict(t *testing.T) {
	e := expectation{line: 69, lib: "redislock", test: "TestLock_Refresh_retry_failure", without: resPass, with: resFail, runs: []string{"with", "fast"}}
	steady, flaky := e, e
	flaky.intermittent = true
	for _, tc := range []struct {
		name  string
		e     expectation
		tally map[string]int
		fail  bool
		has   string
	}{
		{"passes again", steady, map[string]int{resFail: 4, resPass: 1}, false, "it gave pass after 4 other results"},
		{"never passes, steady", steady, map[string]int{resFail: 40}, true, "in 40 more alone"},
		{"never passes, intermittent", flaky, map[string]int{resFail: 40}, false, "NOT JUDGED"},
		{"another result", flaky, map[string]int{resFail: 3, "skip": 1}, true, "skip 1 times"},
	} {
		msg, fail := baseVerdict("fast", tc.e, resFail, tc.tally)
		if fail != tc.fail || !strings.Contains(msg, tc.has) {
			t.Errorf("%s: baseVerdict = (%q, %v), want fail %v and %q in it", tc.name, msg, fail, tc.fail, tc.has)
		}
	}
}
