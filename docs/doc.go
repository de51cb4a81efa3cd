// Package docs holds redrive's user documentation; its tests keep it true.
package docs
