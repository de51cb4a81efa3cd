package fakeapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The codes the fake CaptchaAI answers with, as the services document them.
const (
	CaptchaNotReady        = "CAPCHA_NOT_READY" // the services' spelling
	CaptchaWrongUserKey    = "ERROR_WRONG_USER_KEY"
	CaptchaKeyDoesNotExist = "ERROR_KEY_DOES_NOT_EXIST"
	CaptchaZeroBalance     = "ERROR_ZERO_BALANCE"
	CaptchaNoSlot          = "ERROR_NO_SLOT_AVAILABLE"
	CaptchaBadParameters   = "ERROR_BAD_PARAMETERS"
	CaptchaTooBig          = "ERROR_TOO_BIG_CAPTCHA_FILESIZE"
	CaptchaUnsolvable      = "ERROR_CAPTCHA_UNSOLVABLE"
	CaptchaWrongID         = "ERROR_WRONG_CAPTCHA_ID"
	CaptchaWrongIDFormat   = "ERROR_WRONG_ID_FORMAT"
	CaptchaEmptyAction     = "ERROR_EMPTY_ACTION"
	CaptchaReportRecorded  = "OK_REPORT_RECORDED"
)

// Defaults of CaptchaOptions.
const (
	// DefaultCaptchaKey is the API key the fake accepts unless told
	// another: 32 characters, as the services' keys are.
	DefaultCaptchaKey      = "fakeapi0captchaai0key00000000000"
	DefaultSolveMin        = time.Second
	DefaultSolveMax        = 3 * time.Second
	DefaultPingbackRetries = 3
	DefaultPingbackDelay   = time.Second
	DefaultPingbackTimeout = 5 * time.Second
	DefaultCaptchaBalance  = "100.84"
	DefaultFirstTaskID     = 10_000_000_001
	DefaultMaxTasks        = 100_000
	DefaultMaxBodyBytes    = 1 << 20
	// captchaKeyLen is the length of a well-formed key.
	captchaKeyLen = 32
)

// PingbackStyle is how a pingback is delivered.
type PingbackStyle int

const (
	// PingbackGET: GET <pingback url> with id=<task>&code=<token> added to
	// its query (CaptchaAI).
	PingbackGET PingbackStyle = iota
	// PingbackPOST: POST <pingback url> with the form body id=…&code=…
	// (2captcha).
	PingbackPOST
)

// PingbackOptions say how the fake reports solved tasks to their pingback
// URL. The ratios are shares of tasks with a pingback, drawn per task from
// the seed; a task may be both duplicated and early (a dropped one is
// neither).
type PingbackOptions struct {
	Style PingbackStyle
	// DropRatio of tasks never get their pingback: only polling finds them.
	DropRatio float64
	// DuplicateRatio of tasks get theirs twice, one delivery after the other.
	DuplicateRatio float64
	// EarlyRatio of tasks are solved at once and their pingback delivered
	// (retries included) before in.php answers the submit.
	EarlyRatio float64
	// Retries: deliveries tried again after an answer other than 200 (or
	// none). 0: DefaultPingbackRetries; below 0: none.
	Retries int
	// RetryDelay is the wait before the first retry, doubling after each.
	// Default DefaultPingbackDelay.
	RetryDelay time.Duration
	// Timeout bounds one delivery. Default DefaultPingbackTimeout.
	Timeout time.Duration
}

// CaptchaOptions are the fake CaptchaAI's behaviour. The zero value is a
// service that accepts DefaultCaptchaKey, solves every task in 1–3 s and
// delivers every pingback once.
type CaptchaOptions struct {
	// Key is the API key accepted. Default DefaultCaptchaKey. Another key
	// of 32 characters is ERROR_KEY_DOES_NOT_EXIST; one of another length
	// (or none) ERROR_WRONG_USER_KEY.
	Key string
	// A task is solved a time drawn from [SolveMin, SolveMax] after its
	// submit. Both zero: DefaultSolveMin, DefaultSolveMax.
	SolveMin, SolveMax time.Duration
	// NoSlotRatio of submits are answered ERROR_NO_SLOT_AVAILABLE.
	NoSlotRatio float64
	// UnsolvableRatio of tasks end in ERROR_CAPTCHA_UNSOLVABLE (res.php's
	// answer and the pingback's code) instead of a token.
	UnsolvableRatio float64
	// ZeroBalance starts the fake in the zero-balance mode (SetZeroBalance).
	ZeroBalance bool
	// Balance is action=getbalance's answer. Default DefaultCaptchaBalance.
	Balance  string
	Pingback PingbackOptions
	// FirstTaskID is the first task's id; the next ones count up. Default
	// DefaultFirstTaskID.
	FirstTaskID uint64
	// MaxTasks bounds the tasks remembered; the oldest are forgotten (a
	// poll for one is ERROR_WRONG_CAPTCHA_ID). Default DefaultMaxTasks.
	MaxTasks int
	// MaxBodyBytes bounds a request body. Default DefaultMaxBodyBytes.
	MaxBodyBytes int64
}

// CaptchaStats are the fake CaptchaAI's counters since it started.
type CaptchaStats struct {
	Submits       int64 `json:"submits"`        // in.php requests
	Accepted      int64 `json:"accepted"`       // tasks created
	WrongKey      int64 `json:"wrong_key"`      // ERROR_WRONG_USER_KEY and ERROR_KEY_DOES_NOT_EXIST, both endpoints
	ZeroBalance   int64 `json:"zero_balance"`   // ERROR_ZERO_BALANCE
	BadParameters int64 `json:"bad_parameters"` // ERROR_BAD_PARAMETERS, ERROR_TOO_BIG_CAPTCHA_FILESIZE
	NoSlot        int64 `json:"no_slot"`        // ERROR_NO_SLOT_AVAILABLE
	Polls         int64 `json:"polls"`          // res.php action=get requests
	NotReady      int64 `json:"not_ready"`      // CAPCHA_NOT_READY answers
	Answers       int64 `json:"answers"`        // res.php answers with a token
	Unsolvable    int64 `json:"unsolvable"`     // res.php answers ERROR_CAPTCHA_UNSOLVABLE
	UnknownID     int64 `json:"unknown_id"`     // ERROR_WRONG_CAPTCHA_ID, ERROR_WRONG_ID_FORMAT
	Other         int64 `json:"other"`          // other res.php actions
	// Pingbacks. Sent counts requests (retries and duplicates included),
	// OK those answered 200; Failed deliveries given up after the
	// retries; Dropped, Duplicated and Early count tasks drawn so;
	// Refused submits whose pingback URL is not on 127.0.0.1; Pending
	// tasks whose pingback is still to come or under way.
	PingbacksSent       int64 `json:"pingbacks_sent"`
	PingbacksOK         int64 `json:"pingbacks_ok"`
	PingbackRetries     int64 `json:"pingback_retries"`
	PingbacksFailed     int64 `json:"pingbacks_failed"`
	PingbacksDropped    int64 `json:"pingbacks_dropped"`
	PingbacksDuplicated int64 `json:"pingbacks_duplicated"`
	PingbacksEarly      int64 `json:"pingbacks_early"`
	PingbacksRefused    int64 `json:"pingbacks_refused"`
	PingbacksPending    int64 `json:"pingbacks_pending"`
}

// CaptchaTask is one task as the fake saw it.
type CaptchaTask struct {
	ID     string     `json:"id"`
	Fields url.Values `json:"fields"` // the task's fields (key, json and pingback left out)
	// Result is what the task ends in: its token, or ERROR_CAPTCHA_UNSOLVABLE.
	Result     string    `json:"result"`
	Unsolvable bool      `json:"unsolvable"`
	Submitted  time.Time `json:"submitted"`
	SolvedAt   time.Time `json:"solved_at"`
	// Submits is how many accepted submits had these same fields (more
	// than 1: the task was submitted, and charged, again).
	Submits int `json:"submits"`
	// Polls are res.php action=get requests for it; NotReady those
	// answered CAPCHA_NOT_READY; FirstPoll the time of the first.
	Polls     int       `json:"polls"`
	NotReady  int       `json:"not_ready"`
	FirstPoll time.Time `json:"first_poll,omitzero"`
	// Pingback is its URL ("" none); Dropped, Duplicated, Early what was
	// drawn for it; PingbacksSent requests made, PingbacksOK answered
	// 200, PingbackRetries of them retries; PingbackFailed a delivery was
	// given up; PingbackDone every delivery is over.
	Pingback        string `json:"pingback,omitempty"`
	Dropped         bool   `json:"dropped,omitempty"`
	Duplicated      bool   `json:"duplicated,omitempty"`
	Early           bool   `json:"early,omitempty"`
	PingbacksSent   int    `json:"pingbacks_sent"`
	PingbacksOK     int    `json:"pingbacks_ok"`
	PingbackRetries int    `json:"pingback_retries"`
	PingbackFailed  bool   `json:"pingback_failed,omitempty"`
	PingbackDone    bool   `json:"pingback_done"`
}

type captchaTask struct {
	CaptchaTask
	n     uint64 // its number, from 0
	canon string // canonical fields
	timer *time.Timer
}

// CaptchaAI is the fake CaptchaAI / 2captcha service, an http.Handler.
// Close it to stop its pingbacks.
type CaptchaAI struct {
	o      CaptchaOptions
	seed   uint64
	client *http.Client
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu          sync.Mutex
	closed      bool
	zeroBalance bool
	submits     uint64 // in.php requests that reached the slot draw
	nextTask    uint64
	tasks       map[string]*captchaTask
	order       []string       // task ids, oldest first
	byFields    map[string]int // canonical fields → accepted submits held
	stats       CaptchaStats
}

var _ http.Handler = (*CaptchaAI)(nil)

// NewCaptchaAI returns a fake CaptchaAI behaving as o says, its draws
// made from seed.
func NewCaptchaAI(o CaptchaOptions, seed uint64) *CaptchaAI {
	if o.Key == "" {
		o.Key = DefaultCaptchaKey
	}
	if o.SolveMin == 0 && o.SolveMax == 0 {
		o.SolveMin, o.SolveMax = DefaultSolveMin, DefaultSolveMax
	}
	o.SolveMin = max(o.SolveMin, 0)
	o.SolveMax = max(o.SolveMax, o.SolveMin)
	o.NoSlotRatio, o.UnsolvableRatio = ratio(o.NoSlotRatio), ratio(o.UnsolvableRatio)
	p := &o.Pingback
	p.DropRatio, p.DuplicateRatio, p.EarlyRatio = ratio(p.DropRatio), ratio(p.DuplicateRatio), ratio(p.EarlyRatio)
	switch {
	case p.Retries == 0:
		p.Retries = DefaultPingbackRetries
	case p.Retries < 0:
		p.Retries = 0
	}
	if p.RetryDelay <= 0 {
		p.RetryDelay = DefaultPingbackDelay
	}
	if p.Timeout <= 0 {
		p.Timeout = DefaultPingbackTimeout
	}
	if o.Balance == "" {
		o.Balance = DefaultCaptchaBalance
	}
	if o.FirstTaskID == 0 {
		o.FirstTaskID = DefaultFirstTaskID
	}
	if o.MaxTasks <= 0 {
		o.MaxTasks = DefaultMaxTasks
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &CaptchaAI{
		o: o, seed: seed, client: loopbackClient(p.Timeout), ctx: ctx, cancel: cancel,
		zeroBalance: o.ZeroBalance, tasks: map[string]*captchaTask{}, byFields: map[string]int{},
	}
}

// Close stops the pingbacks not yet sent and waits for those under way.
// The handler keeps answering; new pingbacks are not sent.
func (c *CaptchaAI) Close() {
	c.mu.Lock()
	c.closed = true
	for _, t := range c.tasks {
		if t.timer != nil && t.timer.Stop() {
			c.stopped(t)
		}
	}
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	c.client.CloseIdleConnections()
}

// stopped accounts for a task whose pingback timer was stopped before it
// fired. Caller holds mu.
func (c *CaptchaAI) stopped(t *captchaTask) {
	t.timer = nil
	t.PingbackDone = true
	c.stats.PingbacksPending--
	c.wg.Done()
}

// SetZeroBalance switches the zero-balance mode: every submit is answered
// ERROR_ZERO_BALANCE (and getbalance 0.00) while it is on.
func (c *CaptchaAI) SetZeroBalance(on bool) {
	c.mu.Lock()
	c.zeroBalance = on
	c.mu.Unlock()
}

// Stats returns the counters so far.
func (c *CaptchaAI) Stats() CaptchaStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Task returns the task with id, if the fake still remembers it.
func (c *CaptchaAI) Task(id string) (CaptchaTask, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.tasks[id]
	if !ok {
		return CaptchaTask{}, false
	}
	return c.snapshot(t), true
}

// Tasks returns every task remembered, oldest first.
func (c *CaptchaAI) Tasks() []CaptchaTask {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]CaptchaTask, 0, len(c.order))
	for _, id := range c.order {
		if t, ok := c.tasks[id]; ok {
			out = append(out, c.snapshot(t))
		}
	}
	return out
}

// SubmitsOf is how many accepted submits had these task fields (the
// transport fields key, json, pingback, soft_id and header_acao are
// ignored), among the tasks remembered.
func (c *CaptchaAI) SubmitsOf(fields url.Values) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byFields[canonical(fields)]
}

// snapshot copies t for a caller. Caller holds mu.
func (c *CaptchaAI) snapshot(t *captchaTask) CaptchaTask {
	s := t.CaptchaTask
	s.Fields = cloneValues(t.Fields)
	s.Submits = c.byFields[t.canon]
	return s
}

func cloneValues(v url.Values) url.Values {
	out := make(url.Values, len(v))
	for k, vs := range v {
		out[k] = slices.Clone(vs)
	}
	return out
}

// transportFields are submit parameters that are not part of the task.
var transportFields = map[string]bool{"key": true, "json": true, "pingback": true, "soft_id": true, "header_acao": true}

// taskFields is fields without the transport fields.
func taskFields(fields url.Values) url.Values {
	out := url.Values{}
	for k, vs := range fields {
		if !transportFields[k] {
			out[k] = slices.Clone(vs)
		}
	}
	return out
}

// canonical is a task's fields in one string: sorted names, values in
// order, each length-prefixed so no two field sets give the same string.
func canonical(fields url.Values) string {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		if !transportFields[k] {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		for _, v := range fields[k] {
			b.WriteString(strconv.Itoa(len(k)))
			b.WriteByte(':')
			b.WriteString(k)
			b.WriteString(strconv.Itoa(len(v)))
			b.WriteByte(':')
			b.WriteString(v)
		}
	}
	return b.String()
}

// CaptchaToken is the token the fake answers for a task with these fields
// (the submit's parameters; key, json, pingback, soft_id and header_acao
// are left out, so they may be passed too). A multipart file part counts
// as a field holding the file's content.
func CaptchaToken(fields url.Values) string {
	sum := sha256.Sum256([]byte(canonical(fields)))
	return "fake-" + hex.EncodeToString(sum[:20])
}

// ServeHTTP serves /in.php, /res.php (GET or POST) and GET /stats.
func (c *CaptchaAI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/in.php", "/res.php":
		if r.Method != http.MethodGet && r.Method != http.MethodPost {
			methodNotAllowed(w, "GET, POST")
			return
		}
		params, err := c.params(w, r)
		if r.URL.Path == "/in.php" {
			c.submit(w, params, err)
		} else {
			c.result(w, params, err)
		}
	case "/stats":
		if r.Method != http.MethodGet {
			methodNotAllowed(w, http.MethodGet)
			return
		}
		writeJSON(w, c.Stats())
	default:
		http.NotFound(w, r)
	}
}

// errTooBig: the request body is over MaxBodyBytes.
var errTooBig = errors.New("request body too large")

// params reads the query and a form body (urlencoded or multipart; a
// file part counts as a field holding its content).
func (c *CaptchaAI) params(w http.ResponseWriter, r *http.Request) (url.Values, error) {
	r.Body = http.MaxBytesReader(w, r.Body, c.o.MaxBodyBytes)
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var err error
	if mt == "multipart/form-data" {
		err = r.ParseMultipartForm(c.o.MaxBodyBytes)
		if err == nil && r.MultipartForm != nil {
			defer func() { _ = r.MultipartForm.RemoveAll() }()
			for name, fhs := range r.MultipartForm.File {
				for _, fh := range fhs {
					f, ferr := fh.Open()
					if ferr != nil {
						return r.Form, ferr
					}
					b, ferr := io.ReadAll(f)
					f.Close()
					if ferr != nil {
						return r.Form, ferr
					}
					r.Form[name] = append(r.Form[name], string(b))
				}
			}
		}
	} else {
		err = r.ParseForm()
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return r.Form, errTooBig
	}
	if r.Form == nil {
		r.Form = url.Values{}
	}
	return r.Form, err
}

// keyCode checks an API key: "" when it is the one accepted. Caller holds mu.
func (c *CaptchaAI) keyCode(key string) string {
	switch {
	case key == c.o.Key:
		return ""
	case len(key) != captchaKeyLen:
		c.stats.WrongKey++
		return CaptchaWrongUserKey
	default:
		c.stats.WrongKey++
		return CaptchaKeyDoesNotExist
	}
}

// submit is in.php.
func (c *CaptchaAI) submit(w http.ResponseWriter, p url.Values, perr error) {
	asJSON := p.Get("json") == "1"
	c.mu.Lock()
	c.stats.Submits++
	pingback := p.Get("pingback")
	var code string
	switch {
	case errors.Is(perr, errTooBig): // before the key, which may be in the body
		c.stats.BadParameters++
		code = CaptchaTooBig
	case perr != nil:
		c.stats.BadParameters++
		code = CaptchaBadParameters
	}
	if code == "" {
		code = c.keyCode(p.Get("key"))
	}
	switch {
	case code != "":
	case c.zeroBalance:
		c.stats.ZeroBalance++
		code = CaptchaZeroBalance
	case p.Get("method") == "":
		c.stats.BadParameters++
		code = CaptchaBadParameters
	case pingback != "" && !localURL(pingback):
		c.stats.BadParameters++
		c.stats.PingbacksRefused++
		code = CaptchaBadParameters
	}
	if code != "" {
		c.mu.Unlock()
		reply(w, asJSON, false, code)
		return
	}
	n := c.submits
	c.submits++
	if unit(c.seed, "no-slot", n) < c.o.NoSlotRatio {
		c.stats.NoSlot++
		c.mu.Unlock()
		reply(w, asJSON, false, CaptchaNoSlot)
		return
	}
	t := c.newTask(p, pingback)
	early := t.Early && !c.closed
	if early {
		c.wg.Add(1)
	} else if t.Pingback != "" && !t.Dropped && !c.closed {
		c.wg.Add(1)
		t.timer = time.AfterFunc(time.Until(t.SolvedAt), func() {
			defer c.wg.Done()
			c.mu.Lock()
			t.timer = nil
			c.mu.Unlock()
			c.deliverAll(t)
		})
	} else if t.Pingback != "" && !t.Dropped { // closed: never sent
		t.PingbackDone = true
		c.stats.PingbacksPending--
	}
	id := t.ID
	c.mu.Unlock()
	if early {
		// The receiver hears of the job before the submitter learns its id.
		c.deliverAll(t)
		c.wg.Done()
	}
	reply(w, asJSON, true, id)
}

// newTask creates a task from a submit's parameters, its draws made.
// Caller holds mu.
func (c *CaptchaAI) newTask(p url.Values, pingback string) *captchaTask {
	n := c.nextTask
	c.nextTask++
	now := time.Now()
	fields := taskFields(p)
	t := &captchaTask{n: n, canon: canonical(fields)}
	t.ID = itoa(c.o.FirstTaskID + n)
	t.Fields = fields
	t.Submitted = now
	t.SolvedAt = now.Add(between(c.seed, "solve", n, c.o.SolveMin, c.o.SolveMax))
	t.Result = CaptchaToken(fields)
	if unit(c.seed, "unsolvable", n) < c.o.UnsolvableRatio {
		t.Unsolvable, t.Result = true, CaptchaUnsolvable
	}
	c.stats.Accepted++
	if pingback != "" {
		pb := c.o.Pingback
		t.Pingback = pingback
		t.Dropped = unit(c.seed, "drop", n) < pb.DropRatio
		if t.Dropped {
			c.stats.PingbacksDropped++
			t.PingbackDone = true
		} else {
			t.Duplicated = unit(c.seed, "duplicate", n) < pb.DuplicateRatio
			t.Early = unit(c.seed, "early", n) < pb.EarlyRatio
			if t.Duplicated {
				c.stats.PingbacksDuplicated++
			}
			if t.Early {
				c.stats.PingbacksEarly++
				t.SolvedAt = now
			}
			c.stats.PingbacksPending++
		}
	}
	c.tasks[t.ID] = t
	c.order = append(c.order, t.ID)
	c.byFields[t.canon]++
	for len(c.tasks) > c.o.MaxTasks {
		c.forget(c.order[0])
		c.order = c.order[1:]
	}
	return t
}

// forget drops a task; its pingback, if still to come, is never sent.
// Caller holds mu.
func (c *CaptchaAI) forget(id string) {
	t, ok := c.tasks[id]
	if !ok {
		return
	}
	if t.timer != nil && t.timer.Stop() {
		c.stopped(t)
	}
	delete(c.tasks, id)
	if c.byFields[t.canon]--; c.byFields[t.canon] <= 0 {
		delete(c.byFields, t.canon)
	}
}

// result is res.php.
func (c *CaptchaAI) result(w http.ResponseWriter, p url.Values, _ error) {
	asJSON := p.Get("json") == "1"
	c.mu.Lock()
	if code := c.keyCode(p.Get("key")); code != "" {
		c.mu.Unlock()
		reply(w, asJSON, false, code)
		return
	}
	switch p.Get("action") {
	case "get":
		c.stats.Polls++
		ok, text := c.poll(p.Get("id"))
		c.mu.Unlock()
		reply(w, asJSON, ok, text)
	case "getbalance":
		c.stats.Other++
		balance := c.o.Balance
		if c.zeroBalance {
			balance = "0.00"
		}
		c.mu.Unlock()
		if !asJSON { // a bare number, as the services answer
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = io.WriteString(w, balance)
			return
		}
		reply(w, true, true, balance)
	case "reportgood", "reportbad":
		c.stats.Other++
		c.mu.Unlock()
		reply(w, asJSON, true, CaptchaReportRecorded)
	default:
		c.stats.Other++
		c.mu.Unlock()
		reply(w, asJSON, false, CaptchaEmptyAction)
	}
}

// poll answers action=get for id. Caller holds mu.
func (c *CaptchaAI) poll(id string) (ok bool, text string) {
	if _, err := strconv.ParseUint(id, 10, 64); err != nil {
		c.stats.UnknownID++
		return false, CaptchaWrongIDFormat
	}
	t, found := c.tasks[id]
	if !found {
		c.stats.UnknownID++
		return false, CaptchaWrongID
	}
	now := time.Now()
	t.Polls++
	if t.FirstPoll.IsZero() {
		t.FirstPoll = now
	}
	switch {
	case now.Before(t.SolvedAt):
		t.NotReady++
		c.stats.NotReady++
		return false, CaptchaNotReady
	case t.Unsolvable:
		c.stats.Unsolvable++
		return false, CaptchaUnsolvable
	}
	c.stats.Answers++
	return true, t.Result
}

type captchaBody struct {
	Status  int    `json:"status"`
	Request string `json:"request"`
}

// reply answers in the services' format: JSON with json=1, else plain
// text ("OK|<text>" when ok, the code when not).
func reply(w http.ResponseWriter, asJSON, ok bool, text string) {
	if asJSON {
		b := captchaBody{Request: text}
		if ok {
			b.Status = 1
		}
		writeJSON(w, b)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if ok {
		text = "OK|" + text
	}
	_, _ = io.WriteString(w, text)
}
