package httpapi

import (
	"strings"

	"github.com/danielgtaylor/huma/v2"
)

// documentServers is the OpenAPI document's servers list: one relative
// entry, so that clients resolve the paths against wherever the document
// was fetched from (the service does not know its public address).
func documentServers() []*huma.Server {
	return []*huma.Server{{URL: "/", Description: "This service: the paths are relative to the address that served this document."}}
}

// foldPatternDescriptions removes Huma's non-standard patternDescription
// keyword from every schema of the document, appending its text to the
// schema's description instead. Validation messages are not affected: Huma
// computes them when an operation is registered, so this runs after the last
// registration.
func foldPatternDescriptions(doc *huma.OpenAPI) {
	seen := map[*huma.Schema]bool{}
	var walk func(s *huma.Schema)
	walk = func(s *huma.Schema) {
		if s == nil || seen[s] {
			return
		}
		seen[s] = true
		if s.PatternDescription != "" {
			note := "Must be " + s.PatternDescription + "."
			s.Description = strings.TrimSpace(s.Description + " " + note)
			s.PatternDescription = ""
		}
		walk(s.Items)
		walk(s.Not)
		for _, p := range s.Properties {
			walk(p)
		}
		for _, list := range [][]*huma.Schema{s.OneOf, s.AnyOf, s.AllOf} {
			for _, sub := range list {
				walk(sub)
			}
		}
	}
	if doc.Components != nil && doc.Components.Schemas != nil {
		for _, s := range doc.Components.Schemas.Map() {
			walk(s)
		}
	}
	for _, item := range doc.Paths {
		for _, op := range []*huma.Operation{item.Get, item.Put, item.Post, item.Delete, item.Options, item.Head, item.Patch, item.Trace} {
			if op == nil {
				continue
			}
			for _, p := range op.Parameters {
				walk(p.Schema)
			}
			if op.RequestBody != nil {
				for _, mt := range op.RequestBody.Content {
					walk(mt.Schema)
				}
			}
			for _, r := range op.Responses {
				for _, mt := range r.Content {
					walk(mt.Schema)
				}
			}
		}
	}
}
