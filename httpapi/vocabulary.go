package httpapi

import (
	"reflect"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/pgmirror/pgmirror/db"
)

// vocabularies are the closed lists of values the API shares with the
// catalog, by Go type. A request or response field of one of these types
// gets exactly these values as its OpenAPI enum (and Huma validates
// requests against them); db's tests hold the same lists to the catalog's
// CHECK constraints. A field's doc and default tags still apply.
var vocabularies = map[reflect.Type][]any{}

func init() {
	addVocabulary(db.MirrorStatuses)
	addVocabulary(db.DesiredStates)
	addVocabulary(db.TableStatuses)
	addVocabulary(db.ExistingRowsValues)
	addVocabulary(db.SchemaChangesModes)
	addVocabulary(db.VerificationStates)
	addVocabulary(db.CutoverStates)
	addVocabulary(db.StepStates)
	addVocabulary(db.LostReasons)
	addVocabulary(db.LogLevels)
	addVocabulary(db.UserRoles)
	addVocabulary(db.SSLModes)
	addVocabulary(db.AuditResults)
	addVocabulary(db.AuditTargetTypes)
	addVocabulary(db.PeerRoles)
}

func addVocabulary[T ~string](values []T) {
	enum := make([]any, len(values))
	for i, v := range values {
		enum[i] = string(v)
	}
	vocabularies[reflect.TypeFor[T]()] = enum
}

// vocabularyOf returns the values of t's vocabulary (t, *t, []t or []*t),
// whether the values are those of a list's items, and whether t has one.
func vocabularyOf(t reflect.Type) (enum []any, items, ok bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Slice {
		items, t = true, t.Elem()
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
	}
	enum, ok = vocabularies[t]
	return enum, items, ok
}

// setEnum gives s (or its items) the values enum, and recomputes the
// validation messages Huma derives from them.
func setEnum(s *huma.Schema, enum []any, items bool) {
	if items {
		if s.Items == nil {
			return
		}
		s = s.Items
	}
	s.Enum = enum
	s.PrecomputeMessages()
}

// documentVocabulary sets the enum of every property, in every schema of
// the document's registry, whose Go field has a vocabulary type. It runs
// after the last registration; request validation reads these same
// schemas.
func documentVocabulary(doc *huma.OpenAPI) {
	registry := doc.Components.Schemas
	for name, s := range registry.Map() {
		t := registry.TypeFromRef("#/components/schemas/" + name)
		if t == nil {
			continue
		}
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.Kind() == reflect.Struct {
			setFieldEnums(t, s)
		}
	}
}

// setFieldEnums sets the enums of the properties of s that come from the
// fields of struct type t (fields of embedded structs included, as Huma
// flattens them).
func setFieldEnums(t reflect.Type, s *huma.Schema) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				setFieldEnums(ft, s)
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		if enum, items, ok := vocabularyOf(f.Type); ok && s.Properties[name] != nil {
			setEnum(s.Properties[name], enum, items)
		}
	}
}

// documentParameterVocabulary sets the enum of op's parameters whose field
// in the input type I has a vocabulary type. register calls it for every
// operation once Huma has registered it.
func documentParameterVocabulary[I any](doc *huma.OpenAPI, op huma.Operation) {
	item := doc.Paths[op.Path]
	if item == nil {
		return
	}
	var registered *huma.Operation
	for _, o := range []*huma.Operation{item.Get, item.Put, item.Post, item.Delete, item.Patch, item.Head, item.Options, item.Trace} {
		if o != nil && o.OperationID == op.OperationID {
			registered = o
		}
	}
	if registered == nil {
		return
	}
	t := reflect.TypeFor[I]()
	for i := range t.NumField() {
		f := t.Field(i)
		enum, items, ok := vocabularyOf(f.Type)
		if !ok {
			continue
		}
		for _, in := range []string{"query", "path", "header", "cookie"} {
			name, _, _ := strings.Cut(f.Tag.Get(in), ",")
			if name == "" {
				continue
			}
			for _, p := range registered.Parameters {
				if p.In == in && p.Name == name && p.Schema != nil {
					setEnum(p.Schema, enum, items)
				}
			}
		}
	}
}
