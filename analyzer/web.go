package analyzer

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed web
var webFiles embed.FS

// webHandler serves the dashboard (web/index.html and its assets, all
// embedded: it works offline).
func webHandler() http.Handler {
	sub, err := fs.Sub(webFiles, "web")
	if err != nil {
		panic(err) // the embed pattern guarantees the directory
	}
	return noDirs(sub, http.FileServerFS(sub)) // httpsafe.go: no directory listings
}
