(function () {
  "use strict";
  var spec = null;

  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    (children || []).forEach(function (c) {
      e.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    });
    return e;
  }

  function resolve(schema) {
    var seen = 0;
    while (schema && schema.$ref && seen < 20) {
      var name = schema.$ref.replace("#/components/schemas/", "");
      schema = (spec.components && spec.components.schemas || {})[name];
      seen++;
    }
    return schema || {};
  }

  // describe renders a schema as an indented, readable outline.
  function describe(schema, indent, depth) {
    schema = resolve(schema);
    indent = indent || "";
    if (depth > 8) { return indent + "...\n"; }
    var type = schema.type;
    if (Array.isArray(type)) { type = type.join(" | "); }
    if (type === "array") {
      return indent + "array of\n" + describe(schema.items, indent + "  ", depth + 1);
    }
    if (type === "object" || schema.properties) {
      var out = "";
      var req = schema.required || [];
      Object.keys(schema.properties || {}).forEach(function (name) {
        var p = resolve(schema.properties[name]);
        var pt = p.type;
        if (Array.isArray(pt)) { pt = pt.join(" | "); }
        var line = indent + name + (req.indexOf(name) >= 0 ? " (required)" : "") + ": " + (pt || "any");
        var notes = [];
        if (p.enum) { notes.push("one of " + p.enum.join(", ")); }
        if (p.default !== undefined) { notes.push("default " + JSON.stringify(p.default)); }
        if (p.minimum !== undefined) { notes.push(">= " + p.minimum); }
        if (p.maximum !== undefined) { notes.push("<= " + p.maximum); }
        if (p.minLength !== undefined) { notes.push("min length " + p.minLength); }
        if (p.maxLength !== undefined) { notes.push("max length " + p.maxLength); }
        if (p.pattern) { notes.push("pattern " + p.pattern); }
        if (p.description) { notes.push(p.description); }
        if (notes.length) { line += "  -- " + notes.join("; "); }
        out += line + "\n";
        if (pt === "object" || pt === "array" || p.properties) {
          out += describe(p, indent + "  ", depth + 1);
        }
      });
      return out || indent + "object\n";
    }
    return indent + (type || "any") + (schema.description ? "  -- " + schema.description : "") + "\n";
  }

  function jsonSchemaOf(content) {
    if (!content) { return null; }
    var mt = content["application/json"] || content[Object.keys(content)[0]];
    return mt && mt.schema;
  }

  function permission(op) {
    if (!op.security || op.security.length === 0) { return "open"; }
    return /adminOnly/.test(op.description || "") ? "admin only" : "any token";
  }

  function renderOp(path, method, op) {
    var body = el("div", { "class": "body" });
    if (op.description) { body.appendChild(el("p", {}, [op.description])); }
    if (op.parameters && op.parameters.length) {
      var rows = [el("tr", {}, [el("th", {}, ["Name"]), el("th", {}, ["In"]), el("th", {}, ["Type"]), el("th", {}, ["Description"])])];
      op.parameters.forEach(function (p) {
        var s = resolve(p.schema);
        var t = (s.type || "") + (s.enum ? " (" + s.enum.join(", ") + ")" : "") + (s.default !== undefined ? ", default " + s.default : "");
        rows.push(el("tr", {}, [el("td", {}, [p.name + (p.required ? " *" : "")]), el("td", {}, [p.in]), el("td", {}, [t]), el("td", {}, [p.description || ""])]));
      });
      body.appendChild(el("h4", {}, ["Parameters"]));
      body.appendChild(el("table", {}, rows));
    }
    if (op.requestBody) {
      body.appendChild(el("h4", {}, ["Request body"]));
      body.appendChild(el("pre", {}, [describe(jsonSchemaOf(op.requestBody.content), "", 0)]));
    }
    body.appendChild(el("h4", {}, ["Responses"]));
    Object.keys(op.responses || {}).sort().forEach(function (code) {
      var r = op.responses[code];
      body.appendChild(el("div", {}, [el("strong", {}, [code + " "]), r.description || ""]));
      var s = jsonSchemaOf(r.content);
      if (s) { body.appendChild(el("pre", {}, [describe(s, "", 0)])); }
    });
    var summary = el("summary", {}, [
      el("span", { "class": "method " + method.toUpperCase() }, [method.toUpperCase()]),
      path + "  ",
      el("span", { "class": "muted" }, [op.summary || ""]),
      el("span", { "class": "perm" }, [permission(op)])
    ]);
    var d = el("details", { "data-search": (method + " " + path + " " + (op.summary || "")).toLowerCase() }, [summary, body]);
    return d;
  }

  function render() {
    document.getElementById("title").textContent = spec.info.title + " " + spec.info.version;
    document.getElementById("description").textContent = spec.info.description || "";
    var groups = {};
    Object.keys(spec.paths || {}).forEach(function (path) {
      var item = spec.paths[path];
      ["get", "post", "put", "patch", "delete"].forEach(function (m) {
        if (!item[m]) { return; }
        var tag = (item[m].tags && item[m].tags[0]) || "Other";
        (groups[tag] = groups[tag] || []).push(renderOp(path, m, item[m]));
      });
    });
    var ops = document.getElementById("ops");
    Object.keys(groups).forEach(function (tag) {
      ops.appendChild(el("h2", {}, [tag]));
      groups[tag].forEach(function (d) { ops.appendChild(d); });
    });
  }

  document.getElementById("filter").addEventListener("input", function (e) {
    var q = e.target.value.toLowerCase();
    Array.prototype.forEach.call(document.querySelectorAll("details"), function (d) {
      d.hidden = d.getAttribute("data-search").indexOf(q) < 0;
    });
  });

  fetch("/openapi.json").then(function (r) {
    if (!r.ok) { throw new Error("HTTP " + r.status); }
    return r.json();
  }).then(function (s) { spec = s; render(); }).catch(function (err) {
    document.getElementById("description").textContent = "Could not load /openapi.json: " + err.message;
  });
})();
