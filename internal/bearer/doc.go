// Package bearer is redrive's one check of a shared-secret token: the
// processor's pause and resume (processor.token), the analyzer's API
// (analyzer.token, analyzer.read_token) and the callback intake
// (handler.callback.token) all compare with Equal, read the
// "Authorization: Bearer <token>" header with FromHeader, and refuse a
// configured token that Check does not accept.
//
// Equal compares SHA-256 hashes in constant time, so neither the length
// nor the first differing byte of a guess shows in how long it takes.
//
// It must never log, print or quote a token, in an error or anywhere else:
// its errors say what is wrong with a token, not what it is.
package bearer
