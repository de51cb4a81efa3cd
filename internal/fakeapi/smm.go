package fakeapi

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The errors of the fake SMM panel, as panels word them in {"error": …}.
const (
	SMMInvalidKey       = "Invalid API key"
	SMMIncorrectRequest = "Incorrect request"
	SMMNoFunds          = "Not enough funds on balance"
	SMMIncorrectOrderID = "Incorrect order ID"
)

// Order statuses panels answer.
const (
	SMMPending    = "Pending"
	SMMInProgress = "In progress"
	SMMProcessing = "Processing"
	SMMCompleted  = "Completed"
	SMMPartial    = "Partial"
	SMMCanceled   = "Canceled"
)

// Defaults of SMMOptions.
const (
	DefaultSMMKey        = "fakeapi-smm-key"
	DefaultSMMBalance    = "100.84"
	DefaultSMMCurrency   = "USD"
	DefaultSMMRate       = 0.9 // per 1000
	DefaultFirstOrder    = 23501
	DefaultMaxOrders     = 100_000
	maxStatusOrders      = 100 // orders=… at most, as panels document
	defaultSMMStartCount = 1000
)

// SMMOptions are the fake SMM panel's behaviour. The zero value accepts
// DefaultSMMKey and answers each order "In progress" twice, then
// "Completed".
type SMMOptions struct {
	// Key is the API key accepted; another is "Invalid API key". Default
	// DefaultSMMKey.
	Key string
	// Progress are the statuses of an order's first status answers; nil:
	// "In progress" twice. An empty, non-nil slice: terminal at once.
	Progress []string
	// Terminal is the status after Progress, for good: "Completed"
	// (default), "Partial" or "Canceled" (or any text a panel uses).
	Terminal string
	// TerminalFor, when set and not "", overrides Terminal per order.
	TerminalFor func(service, link string) string
	// NoFunds starts the fake in the no-funds mode (SetNoFunds).
	NoFunds bool
	// Balance and Currency are action=balance's answer. Defaults
	// DefaultSMMBalance, DefaultSMMCurrency.
	Balance, Currency string
	// Rate is the price per 1000 of quantity: an order's charge.
	// Default DefaultSMMRate.
	Rate float64
	// FirstOrder is the first order's id; the next ones count up.
	// Default DefaultFirstOrder.
	FirstOrder int64
	// MaxOrders bounds the orders remembered (the oldest are forgotten).
	// Default DefaultMaxOrders.
	MaxOrders int
	// MaxBodyBytes bounds a request body. Default DefaultMaxBodyBytes.
	MaxBodyBytes int64
}

// SMMStats are the fake SMM panel's counters since it started.
type SMMStats struct {
	Requests     int64 `json:"requests"`      // /api/v2 requests
	Adds         int64 `json:"adds"`          // orders created
	StatusPolls  int64 `json:"status_polls"`  // action=status requests
	Completed    int64 `json:"completed"`     // status answers with a terminal status
	Balances     int64 `json:"balances"`      // action=balance requests
	InvalidKey   int64 `json:"invalid_key"`   // "Invalid API key"
	BadRequests  int64 `json:"bad_requests"`  // "Incorrect request"
	NoFunds      int64 `json:"no_funds"`      // "Not enough funds on balance"
	UnknownOrder int64 `json:"unknown_order"` // "Incorrect order ID" (one per order asked for)
}

// SMMOrder is one order as the fake saw it.
type SMMOrder struct {
	ID         int64     `json:"id"`
	Service    string    `json:"service"`
	Link       string    `json:"link"`
	Quantity   int64     `json:"quantity"`
	Created    time.Time `json:"created"`
	StartCount int64     `json:"start_count"`
	Terminal   string    `json:"terminal"` // the status it ends in
	// Polls are the status answers given for it; Status the last one
	// ("" before the first).
	Polls  int    `json:"polls"`
	Status string `json:"status"`
	// Adds is how many orders had the same service, link and quantity.
	Adds int `json:"adds"`
}

// SMMPanel is the fake SMM panel (API v2), an http.Handler.
type SMMPanel struct {
	o    SMMOptions
	seed uint64

	mu      sync.Mutex
	noFunds bool
	next    int64
	orders  map[int64]*SMMOrder
	order   []int64        // ids, oldest first
	same    map[string]int // service, link, quantity → orders held
	stats   SMMStats
}

var _ http.Handler = (*SMMPanel)(nil)

// NewSMMPanel returns a fake SMM panel behaving as o says, its draws made
// from seed.
func NewSMMPanel(o SMMOptions, seed uint64) *SMMPanel {
	if o.Key == "" {
		o.Key = DefaultSMMKey
	}
	if o.Progress == nil {
		o.Progress = []string{SMMInProgress, SMMInProgress}
	}
	if o.Terminal == "" {
		o.Terminal = SMMCompleted
	}
	if o.Balance == "" {
		o.Balance = DefaultSMMBalance
	}
	if o.Currency == "" {
		o.Currency = DefaultSMMCurrency
	}
	if !(o.Rate > 0) {
		o.Rate = DefaultSMMRate
	}
	if o.FirstOrder <= 0 {
		o.FirstOrder = DefaultFirstOrder
	}
	if o.MaxOrders <= 0 {
		o.MaxOrders = DefaultMaxOrders
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	return &SMMPanel{o: o, seed: seed, noFunds: o.NoFunds, next: o.FirstOrder, orders: map[int64]*SMMOrder{}, same: map[string]int{}}
}

// SetNoFunds switches the no-funds mode: every add is answered "Not
// enough funds on balance" (and balance 0.00) while it is on.
func (s *SMMPanel) SetNoFunds(on bool) {
	s.mu.Lock()
	s.noFunds = on
	s.mu.Unlock()
}

// Stats returns the counters so far.
func (s *SMMPanel) Stats() SMMStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Order returns the order with id, if the fake still remembers it.
func (s *SMMPanel) Order(id int64) (SMMOrder, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.orders[id]
	if !ok {
		return SMMOrder{}, false
	}
	c := *o
	c.Adds = s.same[sameKey(o.Service, o.Link, o.Quantity)]
	return c, true
}

// Orders returns every order remembered, oldest first.
func (s *SMMPanel) Orders() []SMMOrder {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]SMMOrder, 0, len(s.order))
	for _, id := range s.order {
		if o, ok := s.orders[id]; ok {
			c := *o
			c.Adds = s.same[sameKey(o.Service, o.Link, o.Quantity)]
			out = append(out, c)
		}
	}
	return out
}

func sameKey(service, link string, quantity int64) string {
	return strconv.Itoa(len(service)) + ":" + service + strconv.Itoa(len(link)) + ":" + link + "/" + strconv.FormatInt(quantity, 10)
}

// ServeHTTP serves /api/v2 (POST, or GET with the fields in the query)
// and GET /stats.
func (s *SMMPanel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/api/v2":
		if r.Method != http.MethodPost && r.Method != http.MethodGet {
			methodNotAllowed(w, "POST, GET")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, s.o.MaxBodyBytes)
		err := r.ParseForm()
		s.mu.Lock()
		s.stats.Requests++
		if err != nil { // unparsable, or over MaxBodyBytes

			s.stats.BadRequests++
			s.mu.Unlock()
			writeJSON(w, smmError{SMMIncorrectRequest})
			return
		}
		v := s.api(r.Form)
		s.mu.Unlock()
		writeJSON(w, v)
	case "/stats":
		if r.Method != http.MethodGet {
			methodNotAllowed(w, http.MethodGet)
			return
		}
		writeJSON(w, s.Stats())
	default:
		http.NotFound(w, r)
	}
}

type smmError struct {
	Error string `json:"error"`
}

type smmOrderID struct {
	Order int64 `json:"order"`
}

type smmStatus struct {
	Charge     string `json:"charge"`
	StartCount string `json:"start_count"`
	Status     string `json:"status"`
	Remains    string `json:"remains"`
	Currency   string `json:"currency"`
}

type smmBalance struct {
	Balance  string `json:"balance"`
	Currency string `json:"currency"`
}

// api answers one request. Caller holds mu.
func (s *SMMPanel) api(f url.Values) any {
	if f.Get("key") != s.o.Key {
		s.stats.InvalidKey++
		return smmError{SMMInvalidKey}
	}
	switch f.Get("action") {
	case "add":
		return s.add(f)
	case "status":
		s.stats.StatusPolls++
		if ids := f.Get("orders"); ids != "" {
			return s.statuses(ids)
		}
		return s.status(f.Get("order"))
	case "balance":
		s.stats.Balances++
		b := s.o.Balance
		if s.noFunds {
			b = "0.00"
		}
		return smmBalance{Balance: b, Currency: s.o.Currency}
	}
	s.stats.BadRequests++
	return smmError{SMMIncorrectRequest}
}

// add is action=add. Caller holds mu.
func (s *SMMPanel) add(f url.Values) any {
	service, link := f.Get("service"), f.Get("link")
	q, err := strconv.ParseInt(f.Get("quantity"), 10, 64)
	if service == "" || link == "" || err != nil || q <= 0 {
		s.stats.BadRequests++
		return smmError{SMMIncorrectRequest}
	}
	if s.noFunds {
		s.stats.NoFunds++
		return smmError{SMMNoFunds}
	}
	id := s.next
	s.next++
	o := &SMMOrder{ID: id, Service: service, Link: link, Quantity: q, Created: time.Now(), Terminal: s.o.Terminal}
	o.StartCount = defaultSMMStartCount + int64(unit(s.seed, "start-count", uint64(id))*9000)
	if s.o.TerminalFor != nil {
		if t := s.o.TerminalFor(service, link); t != "" {
			o.Terminal = t
		}
	}
	s.orders[id] = o
	s.order = append(s.order, id)
	s.same[sameKey(service, link, q)]++
	s.stats.Adds++
	for len(s.orders) > s.o.MaxOrders {
		old := s.orders[s.order[0]]
		s.order = s.order[1:]
		if old == nil {
			continue
		}
		delete(s.orders, old.ID)
		k := sameKey(old.Service, old.Link, old.Quantity)
		if s.same[k]--; s.same[k] <= 0 {
			delete(s.same, k)
		}
	}
	return smmOrderID{Order: id}
}

// status is action=status&order=N. Caller holds mu.
func (s *SMMPanel) status(id string) any {
	n, err := strconv.ParseInt(id, 10, 64)
	o := s.orders[n]
	if err != nil || o == nil {
		s.stats.UnknownOrder++
		return smmError{SMMIncorrectOrderID}
	}
	o.Polls++
	done := o.Polls > len(s.o.Progress)
	if done {
		o.Status = o.Terminal
		s.stats.Completed++
	} else {
		o.Status = s.o.Progress[o.Polls-1]
	}
	return s.render(o, done)
}

// statuses is action=status&orders=N,M,…: one answer per id, by id.
// Caller holds mu.
func (s *SMMPanel) statuses(ids string) any {
	parts := strings.Split(ids, ",")
	if len(parts) > maxStatusOrders {
		s.stats.BadRequests++
		return smmError{SMMIncorrectRequest}
	}
	out := make(map[string]any, len(parts))
	for _, p := range parts {
		p = strings.TrimSpace(p)
		out[p] = s.status(p)
	}
	return out
}

// render is o's status answer: the charge, start count and remains as
// strings with its status, as panels send them.
func (s *SMMPanel) render(o *SMMOrder, done bool) smmStatus {
	charge := s.o.Rate * float64(o.Quantity) / 1000
	remains := o.Quantity
	if !done {
		steps := int64(len(s.o.Progress) + 1)
		remains = o.Quantity - o.Quantity*int64(o.Polls)/steps
	} else {
		switch o.Status {
		case SMMCompleted:
			remains = 0
		case SMMPartial:
			remains = max(o.Quantity/10, 1)
			charge = charge * float64(o.Quantity-remains) / float64(o.Quantity)
		case SMMCanceled, "Cancelled":
			charge = 0
		}
	}
	return smmStatus{
		Charge:     strconv.FormatFloat(charge, 'f', 5, 64),
		StartCount: strconv.FormatInt(o.StartCount, 10),
		Status:     o.Status,
		Remains:    strconv.FormatInt(remains, 10),
		Currency:   s.o.Currency,
	}
}
