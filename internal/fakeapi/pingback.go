package fakeapi

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// errNotLoopback: a pingback would leave the machine.
var errNotLoopback = errors.New("fakeapi: pingbacks go to loopback addresses only")

// localURL reports whether s is an http(s) URL on 127.0.0.1 (any loopback
// address) or localhost, without user info: the only pingback URLs the
// fake calls.
func localURL(s string) bool {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.User != nil {
		return false
	}
	h := u.Hostname()
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// loopbackClient is the pingback client: no proxy, no redirects, and a
// dialer that refuses every address but a loopback one.
func loopbackClient(timeout time.Duration) *http.Client {
	d := &net.Dialer{
		Timeout: timeout,
		Control: func(_, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
				return errNotLoopback
			}
			return nil
		},
	}
	return &http.Client{
		Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second},
		Timeout:   timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// deliverAll delivers t's pingback, twice when it was drawn duplicated.
func (c *CaptchaAI) deliverAll(t *captchaTask) {
	n := 1
	if t.Duplicated {
		n = 2
	}
	for range n {
		c.deliver(t)
	}
	c.mu.Lock()
	t.PingbackDone = true
	c.stats.PingbacksPending--
	c.mu.Unlock()
}

// deliver sends one pingback of t, trying again after an answer other
// than 200 up to Retries times, the wait doubling.
func (c *CaptchaAI) deliver(t *captchaTask) {
	delay := c.o.Pingback.RetryDelay
	for attempt := 0; ; attempt++ {
		ok := c.send(t)
		c.mu.Lock()
		t.PingbacksSent++
		c.stats.PingbacksSent++
		if ok {
			t.PingbacksOK++
			c.stats.PingbacksOK++
			c.mu.Unlock()
			return
		}
		if attempt >= c.o.Pingback.Retries || c.ctx.Err() != nil {
			t.PingbackFailed = true
			c.stats.PingbacksFailed++
			c.mu.Unlock()
			return
		}
		t.PingbackRetries++
		c.stats.PingbackRetries++
		c.mu.Unlock()
		tm := time.NewTimer(delay)
		select {
		case <-tm.C:
		case <-c.ctx.Done():
			tm.Stop()
		}
		delay *= 2
	}
}

// send makes one pingback request; true when it was answered 200.
func (c *CaptchaAI) send(t *captchaTask) bool {
	u, err := url.Parse(t.Pingback)
	if err != nil {
		return false
	}
	u.Fragment, u.RawFragment = "", ""
	form := "id=" + url.QueryEscape(t.ID) + "&code=" + url.QueryEscape(t.Result)
	ctx, cancel := context.WithTimeout(c.ctx, c.o.Pingback.Timeout)
	defer cancel()
	var req *http.Request
	if c.o.Pingback.Style == PingbackPOST {
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, u.String(), strings.NewReader(form))
		if err == nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
	} else {
		if u.RawQuery != "" {
			u.RawQuery += "&"
		}
		u.RawQuery += form
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	}
	if err != nil {
		return false
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
