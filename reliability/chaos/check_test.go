package chaos_test

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// The rule of the checker (issue 26, item 7; invariant I15): when two jobs
// work on one key at once, the earlier one must have been told that it
// lost its lock (its job context cancelled with a loss reason, or OnLost
// called for its lock) no later than the instant the later one obtained
// the key: a job told after another could take its key worked, for a
// while, on a lock another job held. Such an overlap is LATE, however
// small the delay, and whatever the machine's load (which the lag meter
// measures and the description reports): a watchdog that knows it may
// not confirm a renewal in time must say so before the key can expire.
// The one excuse is the fencing limit: the earlier job's process was
// itself stopped (the parent's SIGSTOP) while its lock could expire, and
// it was told, or ended, no later than tellWithin after it ran again (or
// after the later start, if that came after). See report.classify.
//
// tellWithin is how soon after its process continues (SIGCONT) a job
// whose lock expired while it was stopped must have been told or have
// ended.
const tellWithin = 100 * time.Millisecond

// job is one job's interval, from its journal's start and end records.
type job struct {
	proc                  int
	owner, key, lib       string
	value                 string
	ttl, plan             time.Duration
	start, end            time.Time
	open                  bool      // no end record: end is the journal's last time
	cancelAt              time.Time // zero when its context was not cancelled
	cause, class          string
	release, releaseClass string
	lostAt                time.Time // the first OnLost report of its lock; zero when none
	lostCause, lostClass  string
}

// told returns when the job was first told that it lost its lock, and how;
// ok is false when it never was.
func (j *job) told() (at time.Time, how string, ok bool) {
	if !j.cancelAt.IsZero() && lossClasses[j.class] {
		at, how, ok = j.cancelAt, "job context cancelled ("+j.class+")", true
	}
	if !j.lostAt.IsZero() && lossClasses[j.lostClass] && (!ok || j.lostAt.Before(at)) {
		at, how, ok = j.lostAt, "OnLost ("+j.lostClass+")", true
	}
	return at, how, ok
}

// overlap is two jobs working on one key at once: b started while a was
// working.
type overlap struct {
	a, b    *job
	verdict string // "explained", "late", "stalled" or "silent"; see classify
	why     string
	// lagSlack: how long, by its lag meter, a's process was not running
	// between b's start and a's telling or end (reported, not excused).
	lagSlack time.Duration
	// stop: the SIGSTOP of a's process that excused a stalled overlap.
	stop lagSpan
}

func (o overlap) sameProc() bool { return o.a.proc == o.b.proc }

func (o overlap) duration() time.Duration {
	return earlier(o.a.end, o.b.end).Sub(o.b.start)
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// lagSpan is one lag record: the process was not running for late,
// somewhere within [from, to].
type lagSpan struct {
	from, to time.Time
	late     time.Duration
}

// report is what the checker found in a run's journals.
type report struct {
	jobs      []*job
	overlaps  []overlap
	problems  []string          // malformed journals, jobs never ended
	causes    map[string]int    // job contexts cancelled, by class
	lost      map[string]int    // OnLost reports, by class
	lostStray int               // OnLost reports that match no job
	summaries map[int]record    // by process
	lags      map[int][]lagSpan // by process
	stops     map[int][]lagSpan // the parent's SIGSTOPs, by process (late is unused)
	faults    []fault           // every fault the parent injected, from its faults file
	first     time.Time         // the earliest start
}

func (r *report) count(verdict string, same bool) int {
	n := 0
	for _, o := range r.overlaps {
		if o.verdict == verdict && o.sameProc() == same {
			n++
		}
	}
	return n
}

// check reads the records of every journal of a run and classifies every
// overlap.
func check(records []record) *report {
	r := &report{causes: map[string]int{}, lost: map[string]int{}, summaries: map[int]record{}, lags: map[int][]lagSpan{}, stops: map[int][]lagSpan{}}
	byOwner := map[string]*job{}
	type lockRef struct {
		proc       int
		key, value string
	}
	byLock := map[lockRef]*job{}
	var lastAt time.Time
	for _, rec := range records {
		if at := fromNanos(rec.At); at.After(lastAt) {
			lastAt = at
		}
	}
	var losts []record
	for _, rec := range records {
		switch rec.Kind {
		case recStart:
			if byOwner[rec.Owner] != nil {
				r.problems = append(r.problems, fmt.Sprintf("job %s started twice", rec.Owner))
				continue
			}
			j := &job{proc: rec.Proc, owner: rec.Owner, key: rec.Key, lib: rec.Lib, value: rec.Value,
				ttl: time.Duration(rec.TTL), plan: time.Duration(rec.Plan), start: fromNanos(rec.At), end: lastAt, open: true}
			byOwner[rec.Owner] = j
			byLock[lockRef{rec.Proc, rec.Key, rec.Value}] = j
			r.jobs = append(r.jobs, j)
		case recEnd:
			j := byOwner[rec.Owner]
			if j == nil || !j.open {
				r.problems = append(r.problems, fmt.Sprintf("job %s ended without a start, or twice", rec.Owner))
				continue
			}
			j.open, j.end = false, fromNanos(rec.At)
			j.cancelAt, j.cause, j.class = fromNanos(rec.CancelAt), rec.Cause, rec.CauseClass
			j.release, j.releaseClass = rec.Release, rec.ReleaseClass
			if rec.CauseClass != "" {
				r.causes[rec.CauseClass]++
			}
		case recLost:
			losts = append(losts, rec)
		case recLag:
			r.lags[rec.Proc] = append(r.lags[rec.Proc], lagSpan{fromNanos(rec.From), fromNanos(rec.At), time.Duration(rec.Late)})
		case recSummary:
			r.summaries[rec.Proc] = rec
		case recFault:
			f := faultOf(rec)
			r.faults = append(r.faults, f)
			if f.kind == faultWorkerPause && f.proc >= 0 {
				r.stops[f.proc] = append(r.stops[f.proc], lagSpan{from: f.from, to: f.to})
			}
		default:
			r.problems = append(r.problems, fmt.Sprintf("unknown record kind %q", rec.Kind))
		}
	}
	for _, rec := range losts {
		r.lost[rec.CauseClass]++
		j := byLock[lockRef{rec.Proc, rec.Key, rec.Value}]
		if j == nil {
			r.lostStray++
			continue
		}
		if at := fromNanos(rec.At); j.lostAt.IsZero() || at.Before(j.lostAt) {
			j.lostAt, j.lostCause, j.lostClass = at, rec.Cause, rec.CauseClass
		}
	}
	for _, j := range r.jobs {
		if j.open {
			r.problems = append(r.problems, fmt.Sprintf("job %s on %s (process %d) has no end record", j.owner, j.key, j.proc))
		}
		if r.first.IsZero() || j.start.Before(r.first) {
			r.first = j.start
		}
	}

	byKey := map[string][]*job{}
	for _, j := range r.jobs {
		byKey[j.key] = append(byKey[j.key], j)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		js := byKey[k]
		slices.SortFunc(js, func(a, b *job) int {
			return cmp.Or(a.start.Compare(b.start), cmp.Compare(a.owner, b.owner))
		})
		for i, a := range js {
			for _, b := range js[i+1:] {
				if !b.start.Before(a.end) {
					break // sorted by start: no later job starts before a's end either
				}
				r.overlaps = append(r.overlaps, r.classify(a, b))
			}
		}
	}
	return r
}

// classify judges one overlap (b started while a was working) by the rule
// above:
//
//   - explained: a was told no later than b's start (it then stopped at
//     once; the overlap is its reaction time);
//   - stalled: a's process was stopped by the parent (SIGSTOP) at some
//     time within a's TTL before b's start, and a was told, or ended, no
//     later than tellWithin after the later of b's start and the end of
//     that stop: its lock expired while its process stood still, which no
//     watchdog can prevent (fencing), and it stopped as soon as it could;
//   - stalled too: a's process, by its own lag meter, was not running
//     (its host froze it) for at least as long as it was late, between a
//     quarter of a's TTL before b's start and its telling or end: had it
//     run, it would have been told in time;
//   - late: a was told, after b's start;
//   - silent: a was never told.
func (r *report) classify(a, b *job) overlap {
	o := overlap{a: a, b: b}
	at, how, ok := a.told()
	if ok && !at.After(b.start) {
		o.verdict = "explained"
		o.why = fmt.Sprintf("%s %v before the other started", how, b.start.Sub(at).Round(time.Microsecond))
		return o
	}
	stopped := func() string {
		if stall := r.stall(a.proc, b.start, earlier(a.end, cmp.Or(at, a.end))); stall > 0 {
			o.lagSlack = stall
			return fmt.Sprintf("; its process was measurably not running for %v of that time (not excused: less than it was late)", stall.Round(time.Millisecond))
		}
		return ""
	}
	if s, found := r.stoppedWithin(a.proc, b.start.Add(-a.ttl), b.start); found {
		limit := b.start
		if s.to.After(limit) {
			limit = s.to
		}
		limit = limit.Add(tellWithin)
		switch {
		case ok && !at.After(limit):
			o.verdict, o.stop = "stalled", s
			o.why = fmt.Sprintf("its process was stopped (SIGSTOP) %v for %v, within a TTL before the other started; %s %v after the other started, within %v of its process continuing",
				s.from.Sub(b.start).Round(time.Millisecond), s.to.Sub(s.from).Round(time.Millisecond), how, at.Sub(b.start).Round(time.Millisecond), tellWithin)
			return o
		case !a.end.After(limit):
			o.verdict, o.stop = "stalled", s
			o.why = fmt.Sprintf("its process was stopped (SIGSTOP) %v for %v, within a TTL before the other started; it ended %v after the other started, within %v of its process continuing",
				s.from.Sub(b.start).Round(time.Millisecond), s.to.Sub(s.from).Round(time.Millisecond), a.end.Sub(b.start).Round(time.Millisecond), tellWithin)
			if !ok {
				o.why += "; never told"
			}
			return o
		}
	}
	// The host stopped a's process: by its own lag meter, it was not
	// running, in the time its watchdog had to tell it (from a quarter of
	// its TTL, the most a tell is moved forward, before the other's start)
	// until it was told or ended, for at least as long as it was late.
	// Had it run, it would have been on time: the fencing limit, as for a
	// SIGSTOP (a host's frozen CPU, seen here as a kernel "workqueue
	// lockup" of 37-68 s, is one).
	told, until := a.end, "it ended"
	if ok && at.Before(told) {
		told, until = at, "it was told ("+how+")"
	}
	if late := told.Sub(b.start); late > 0 {
		if stall := r.stall(a.proc, b.start.Add(-a.ttl/4), told); stall >= late {
			o.verdict, o.lagSlack = "stalled", stall
			o.why = fmt.Sprintf("its process was measurably not running (its host did not run it) for %v between a quarter of its TTL before the other started and when %s, %v after the other started: at least as long as it was late",
				stall.Round(time.Millisecond), until, late.Round(time.Millisecond))
			if !ok {
				o.why += "; never told"
			}
			return o
		}
	}
	if ok {
		o.verdict = "late"
		o.why = fmt.Sprintf("told late: %s %v after the other had obtained the key", how, at.Sub(b.start).Round(time.Microsecond)) + stopped()
		return o
	}
	o.verdict = "silent"
	o.why = "never told"
	if a.class != "" {
		o.why += fmt.Sprintf(" (its context ended with %s: %s)", a.class, a.cause)
	}
	o.why += stopped()
	return o
}

// stoppedWithin returns the last SIGSTOP of process proc that overlaps
// [from, to].
func (r *report) stoppedWithin(proc int, from, to time.Time) (lagSpan, bool) {
	var out lagSpan
	found := false
	for _, s := range r.stops[proc] {
		if s.to.Before(from) || s.from.After(to) {
			continue
		}
		if !found || s.from.After(out.from) {
			out, found = s, true
		}
	}
	return out, found
}

// stall returns how long, by its lag meter, process proc was not running
// within [from, to]: the sum of the lateness of each lag record, each
// bounded by how much of the record's span lies in the window. A record's
// span is longer than its lateness by at most the journaling period, so
// this may count up to that much more than the process really stood
// still.
func (r *report) stall(proc int, from, to time.Time) time.Duration {
	var sum time.Duration
	for _, l := range r.lags[proc] {
		lo, hi := l.from, l.to
		if lo.Before(from) {
			lo = from
		}
		if hi.After(to) {
			hi = to
		}
		if hi.After(lo) {
			sum += min(l.late, hi.Sub(lo))
		}
	}
	return sum
}

// fault is one fault the parent injected.
type fault struct {
	kind, target, note string
	proc               int // the worker it hit; -1: none
	from, to           time.Time
}

// describe tells one overlap in full, with times relative to origin, the
// last fault that began before the later job started, and the log lines
// of the earlier job's process that name the key around then.
func (o overlap) describe(origin time.Time, faults []fault, logs map[int][]logLine) string {
	rel := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return fmt.Sprintf("%+.3fs", t.Sub(origin).Seconds())
	}
	var b strings.Builder
	scope := "across processes"
	if o.sameProc() {
		scope = fmt.Sprintf("within process %d", o.a.proc)
	}
	fmt.Fprintf(&b, "%s overlap on %s, %s, %v long: %s\n", strings.ToUpper(o.verdict), o.a.key, scope, o.duration().Round(time.Millisecond), o.why)
	b.WriteString(o.a.line("earlier", rel))
	b.WriteString(o.b.line("later", rel))
	var last *fault
	for i := range faults {
		if faults[i].from.Before(o.b.start) {
			last = &faults[i]
		}
	}
	if last != nil {
		fmt.Fprintf(&b, "    last fault before the later start: %s %s %s..%s %s\n", last.kind, last.target, rel(last.from), rel(last.to), last.note)
	} else {
		b.WriteString("    no fault before the later start\n")
	}
	for _, proc := range []int{o.a.proc, o.b.proc} {
		n := 0
		for _, l := range logs[proc] {
			if l.at.Before(o.a.start.Add(-time.Second)) || l.at.After(o.b.start.Add(3*time.Second)) {
				continue
			}
			if !strings.Contains(l.text, o.a.key) && !strings.Contains(l.text, "renewal failed") && !strings.Contains(l.text, "renewal not answered") {
				continue
			}
			if n == 0 {
				fmt.Fprintf(&b, "    process %d's watchdog log from the earlier start-1s to the later start+3s (the key, and renewal failures and hedges):\n", proc)
			}
			if n++; n > 12 {
				b.WriteString("      …\n")
				break
			}
			fmt.Fprintf(&b, "      %s %s\n", rel(l.at), l.text)
		}
		if proc == o.a.proc && o.sameProc() {
			break
		}
	}
	return b.String()
}

// logLine is one line of a worker's watchdog log (slog's text handler).
type logLine struct {
	at   time.Time
	text string
}

// parseLog reads the time of each slog text line; lines without one are
// kept with the time of the line before.
func parseLog(text string) []logLine {
	var out []logLine
	var at time.Time
	for _, line := range strings.Split(text, "\n") {
		if line == "" {
			continue
		}
		if v, ok := strings.CutPrefix(line, "time="); ok {
			v, _, _ = strings.Cut(v, " ")
			if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
				at = t
			}
		}
		out = append(out, logLine{at: at, text: line})
	}
	return out
}

// summary is the run's figures, in a few lines.
func (r *report) summary() string {
	var b strings.Builder
	procs := make([]int, 0, len(r.summaries))
	for p := range r.summaries {
		procs = append(procs, p)
	}
	slices.Sort(procs)
	for _, p := range procs {
		s := r.summaries[p]
		var worst time.Duration
		for _, l := range r.lags[p] {
			worst = max(worst, l.late)
		}
		fmt.Fprintf(&b, "  process %d: %d jobs (%d of them by its contender), %d obtains refused (key held), %d obtain errors, %d renewals, worst lateness %v; watchdog: %d deadlines missed, %d holders told a lock may be lost, %d of them after E - d\n",
			p, s.Jobs, s.Contended, s.NotObtained, s.ObtainErrs, s.Renewals, worst.Round(time.Millisecond), s.Missed, s.Unconfirmed, s.ToldLate)
		if len(s.ErrKinds) > 0 {
			fmt.Fprintf(&b, "    obtain errors: %v\n", s.ErrKinds)
		}
	}
	fmt.Fprintf(&b, "  job contexts cancelled, by cause: %v\n", r.causes)
	var afterEnd int
	for _, j := range r.jobs {
		if !j.lostAt.IsZero() && j.lostAt.After(j.end) {
			afterEnd++
		}
	}
	fmt.Fprintf(&b, "  OnLost reports, by reason: %v (%d match no job, %d came after their job had ended)\n", r.lost, r.lostStray, afterEnd)
	fmt.Fprintf(&b, "  jobs that finished untold but whose release found the lock no longer held: %d (no overlap unless counted below)\n", len(r.untoldLosses()))
	same := 0
	var lateBy []time.Duration
	for _, o := range r.overlaps {
		if o.sameProc() {
			same++
		}
		if o.verdict == "late" {
			lateBy = append(lateBy, o.told().Sub(o.b.start))
		}
	}
	lateNote := ""
	if len(lateBy) > 0 {
		slices.Sort(lateBy)
		lateNote = fmt.Sprintf(", told %v to %v (median %v) after the other obtained", lateBy[0].Round(time.Microsecond), lateBy[len(lateBy)-1].Round(time.Microsecond), lateBy[len(lateBy)/2].Round(time.Microsecond))
	}
	fmt.Fprintf(&b, "  overlaps: %d (within one process %d, across processes %d); explained %d (told before the other obtained); stalled %d (SIGSTOPped, or not run by the host for as long as it was late); LATE %d (within one process %d, across processes %d%s); SILENT %d (within one process %d, across processes %d)\n",
		len(r.overlaps), same, len(r.overlaps)-same,
		r.count("explained", true)+r.count("explained", false),
		r.count("stalled", true)+r.count("stalled", false),
		r.count("late", true)+r.count("late", false), r.count("late", true), r.count("late", false), lateNote,
		r.count("silent", true)+r.count("silent", false), r.count("silent", true), r.count("silent", false))
	return b.String()
}

func (o overlap) told() time.Time {
	at, _, _ := o.a.told()
	return at
}

// untoldLosses returns the jobs that were never told of a loss before
// they ended, yet whose release found their lock expired or another
// owner's: their lock was lost while they worked, or between their end
// and their release. Only an overlap proves that another job worked
// meanwhile; these are reported, not judged.
func (r *report) untoldLosses() []*job {
	var out []*job
	for _, j := range r.jobs {
		if j.releaseClass != "not-held" {
			continue
		}
		if at, _, ok := j.told(); ok && !at.After(j.end) {
			continue
		}
		out = append(out, j)
	}
	return out
}

// line describes the job in one line, with times told by rel.
func (j *job) line(role string, rel func(time.Time) string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "    %s %s %s ttl %v plan %v value %.12s…: start %s end %s", role, j.owner, j.lib, j.ttl, j.plan.Round(time.Millisecond), j.value, rel(j.start), rel(j.end))
	if j.open {
		b.WriteString(" (no end record)")
	}
	if !j.cancelAt.IsZero() {
		fmt.Fprintf(&b, "; context cancelled %s: %s", rel(j.cancelAt), j.cause)
	} else {
		b.WriteString("; context not cancelled")
	}
	if !j.lostAt.IsZero() {
		fmt.Fprintf(&b, "; OnLost %s: %s", rel(j.lostAt), j.lostCause)
	}
	if j.release != "" {
		fmt.Fprintf(&b, "; release: %s", strings.Join(strings.Fields(j.release), " "))
	}
	b.WriteString("\n")
	return b.String()
}

// TestFaultNear: a fault explains an untold job's late release when it
// hit every worker (a master) or the job's own process, between the job's
// start and a TTL after its end.
func TestFaultNear(t *testing.T) {
	origin := time.Now()
	at := func(s float64) time.Time { return origin.Add(time.Duration(s * float64(time.Second))) }
	j := &job{proc: 1, ttl: time.Second, start: at(10), end: at(11)}
	for _, tc := range []struct {
		f    fault
		want bool
	}{
		{fault{kind: "master-sigstop", proc: -1, from: at(11.5), to: at(13)}, true},  // within a TTL after its end
		{fault{kind: "master-sigstop", proc: -1, from: at(12.5), to: at(14)}, false}, // more than a TTL after
		{fault{kind: "worker-partition", proc: 1, from: at(8), to: at(10.2)}, true},  // its own process, at its start
		{fault{kind: "worker-partition", proc: 2, from: at(10), to: at(11)}, false},  // another process
		{fault{kind: "master-sigkill", proc: -1, from: at(5), to: at(9.9)}, false},   // over before it started
	} {
		if _, got := faultNear([]fault{tc.f}, j); got != tc.want {
			t.Errorf("faultNear(%s of proc %d, +%v..+%v) = %v, want %v", tc.f.kind, tc.f.proc, tc.f.from.Sub(origin), tc.f.to.Sub(origin), got, tc.want)
		}
	}
}
