// Schema identifiers, anchors and reference resolution (see schema_index.hpp).
#include "runtime/grammar/json_schema/schema_index.hpp"

#include "common/error.hpp"

#include <vector>

namespace di::grammar::json_detail {

namespace {

struct uri_parts {
  std::string scheme, authority, path, query, fragment;
  bool has_authority = false, has_query = false, has_fragment = false;
};

uri_parts split_uri(const std::string& u) {
  uri_parts p;
  std::string rest = u;
  if (auto h = rest.find('#'); h != std::string::npos) {
    p.fragment = rest.substr(h + 1), p.has_fragment = true, rest = rest.substr(0, h);
  }
  if (auto q = rest.find('?'); q != std::string::npos) {
    p.query = rest.substr(q + 1), p.has_query = true, rest = rest.substr(0, q);
  }
  auto colon = rest.find(':');
  auto slash = rest.find('/');
  if (colon != std::string::npos && (slash == std::string::npos || colon < slash) && colon > 0) {
    p.scheme = rest.substr(0, colon);
    rest = rest.substr(colon + 1);
  }
  if (rest.rfind("//", 0) == 0) {
    auto end = rest.find('/', 2);
    p.authority = rest.substr(2, end == std::string::npos ? std::string::npos : end - 2);
    p.has_authority = true;
    rest = end == std::string::npos ? "" : rest.substr(end);
  }
  p.path = rest;
  return p;
}

std::string remove_dots(const std::string& path) {
  std::vector<std::string> out;
  std::size_t i = 0;
  bool absolute = !path.empty() && path[0] == '/';
  while (i <= path.size()) {
    auto j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    std::string seg = path.substr(i, j - i);
    if (seg == "..") {
      if (!out.empty()) out.pop_back();
    } else if (seg != "." && !(seg.empty() && j < path.size())) {
      out.push_back(seg);
    }
    i = j + 1;
  }
  std::string r = absolute ? "/" : "";
  for (std::size_t k = 0; k < out.size(); ++k) r += (k ? "/" : "") + out[k];
  return r;
}

std::string join(const uri_parts& p) {
  std::string r;
  if (!p.scheme.empty()) r += p.scheme + ":";
  if (p.has_authority) r += "//" + p.authority;
  r += p.path;
  if (p.has_query) r += "?" + p.query;
  if (p.has_fragment) r += "#" + p.fragment;
  return r;
}

std::string strip_fragment(const std::string& u) { return u.substr(0, u.find('#')); }

std::string unescape_pointer_token(std::string t) {
  std::string out;
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '%' && i + 2 < t.size()) {
      out.push_back(char(std::stoi(t.substr(i + 1, 2), nullptr, 16)));
      i += 2;
    } else if (t[i] == '~' && i + 1 < t.size()) {
      out.push_back(t[i + 1] == '1' ? '/' : '~');
      ++i;
    } else {
      out.push_back(t[i]);
    }
  }
  return out;
}

const std::vector<std::string>& schema_map_keywords() {
  static const std::vector<std::string> k = {"properties", "patternProperties", "$defs", "definitions",
                                             "dependentSchemas", "dependencies"};
  return k;
}
const std::vector<std::string>& schema_list_keywords() {
  static const std::vector<std::string> k = {"allOf", "anyOf", "oneOf", "prefixItems", "items"};
  return k;
}
const std::vector<std::string>& schema_keywords() {
  static const std::vector<std::string> k = {"additionalProperties", "items", "additionalItems", "contains", "not",
                                             "if", "then", "else", "propertyNames", "unevaluatedItems",
                                             "unevaluatedProperties", "contentSchema"};
  return k;
}

}  // namespace

std::string resolve_uri(const std::string& base, const std::string& ref) {
  uri_parts r = split_uri(ref), b = split_uri(base), t;
  if (!r.scheme.empty()) {
    t = r;
    t.path = remove_dots(r.path);
  } else if (r.has_authority) {
    t = r;
    t.scheme = b.scheme;
    t.path = remove_dots(r.path);
  } else if (r.path.empty()) {
    t = b;
    if (r.has_query) t.query = r.query, t.has_query = true;
    t.fragment = r.fragment;
    t.has_fragment = r.has_fragment;
  } else {
    t = b;
    if (r.path[0] == '/') {
      t.path = remove_dots(r.path);
    } else {
      std::string dir = b.path.substr(0, b.path.rfind('/') + 1);
      if (b.has_authority && b.path.empty()) dir = "/";
      t.path = remove_dots(dir + r.path);
    }
    t.query = r.query, t.has_query = r.has_query;
    t.fragment = r.fragment, t.has_fragment = r.has_fragment;
  }
  return join(t);
}

schema_index::schema_index(const json& root, const std::vector<std::pair<std::string, json>>& documents,
                           bool legacy_id, bool ref_hides_id)
    : legacy_id_(legacy_id), ref_hides_id_(ref_hides_id) {
  for (const auto& [uri, doc] : documents) {
    std::string base = strip_fragment(uri);
    resources_.emplace(base, &doc);
    walk(doc, base, 0);
  }
  root_base_ = "urn:deepinfer:root";
  root_ = &root;
  walk(root, root_base_, 0);
  resources_.emplace(root_base_, &root);
}

void schema_index::walk(const json& node, const std::string& parent_base, int depth) {
  DI_CHECK(depth < 512, "JSON Schema nested more than 512 levels deep");
  if (!node.is_object()) return;
  std::string base = parent_base;
  const char* id_key = legacy_id_ ? "id" : "$id";
  bool id_hidden = ref_hides_id_ && node.contains("$ref");
  if (auto it = node.find(id_key); it != node.end() && it->is_string() && !id_hidden) {
    std::string id = it->get<std::string>();
    if (!id.empty() && id[0] == '#') {
      anchors_.emplace(strip_fragment(base) + id, &node);  // draft 7 plain-name fragment
    } else {
      base = resolve_uri(parent_base, id);
      resources_.emplace(strip_fragment(base), &node);
    }
  }
  for (const char* key : {"$anchor", "$dynamicAnchor"})
    if (auto it = node.find(key); it != node.end() && it->is_string())
      anchors_.emplace(strip_fragment(base) + "#" + it->get<std::string>(), &node);
  if (auto it = node.find("$dynamicAnchor"); it != node.end() && it->is_string())
    dynamic_anchors_[it->get<std::string>()].push_back(strip_fragment(base));
  if (auto it = node.find("$recursiveAnchor"); it != node.end() && *it == true)
    recursive_anchors_.push_back(strip_fragment(base));
  bases_.emplace(&node, base);
  for (const auto& k : schema_map_keywords())
    if (auto it = node.find(k); it != node.end() && it->is_object())
      for (const auto& [name, sub] : it->items()) walk(sub, base, depth + 1);
  for (const auto& k : schema_list_keywords())
    if (auto it = node.find(k); it != node.end() && it->is_array())
      for (const auto& sub : *it) walk(sub, base, depth + 1);
  for (const auto& k : schema_keywords())
    if (auto it = node.find(k); it != node.end() && it->is_object()) walk(*it, base, depth + 1);
}

std::optional<schema_index::target> schema_index::resolve_dynamic(const std::string& base, const std::string& ref,
                                                                  bool recursive) const {
  target t = resolve(base, ref);
  std::string name;
  if (recursive) {
    if (!t.schema->is_object() || !t.schema->contains("$recursiveAnchor") || (*t.schema)["$recursiveAnchor"] != true)
      return t;
  } else {
    std::size_t hash = ref.find('#');
    if (hash == std::string::npos || hash + 1 == ref.size() || ref[hash + 1] == '/') return t;
    name = ref.substr(hash + 1);
    if (!t.schema->is_object() || !t.schema->contains("$dynamicAnchor") || (*t.schema)["$dynamicAnchor"] != name)
      return t;
  }
  std::vector<std::string> defining = recursive ? recursive_anchors_ : dynamic_anchors_.at(name);
  std::sort(defining.begin(), defining.end());
  defining.erase(std::unique(defining.begin(), defining.end()), defining.end());
  const std::string root = strip_fragment(base_of(root_, root_base_));
  if (std::find(defining.begin(), defining.end(), root) != defining.end())
    return recursive ? target{root_, base_of(root_, root_base_)} : resolve(root, "#" + name);
  if (defining.size() == 1) return t;
  return std::nullopt;
}

std::string schema_index::base_of(const json* schema, const std::string& parent_base) const {
  auto it = bases_.find(schema);
  return it == bases_.end() ? parent_base : it->second;
}

schema_index::target schema_index::resolve(const std::string& base, const std::string& ref) const {
  std::string abs = resolve_uri(base, ref);
  std::string doc = strip_fragment(abs);
  std::string fragment = abs.find('#') == std::string::npos ? "" : abs.substr(abs.find('#') + 1);
  if (!fragment.empty() && fragment[0] != '/') {
    auto it = anchors_.find(doc + "#" + fragment);
    DI_CHECK(it != anchors_.end(), "$ref '{}': no anchor '{}' in this document", ref, fragment);
    return {it->second, base_of(it->second, doc)};
  }
  auto res = resources_.find(doc);
  DI_CHECK(res != resources_.end(),
           "$ref '{}': '{}' is not part of this schema (remote references are not supported)", ref, doc);
  const json* node = res->second;
  std::string node_base = base_of(node, doc);
  std::size_t i = 1;
  while (i <= fragment.size() && !fragment.empty()) {
    std::size_t j = fragment.find('/', i);
    if (j == std::string::npos) j = fragment.size();
    std::string token = unescape_pointer_token(fragment.substr(i, j - i));
    if (node->is_object() && node->contains(token)) {
      node = &(*node)[token];
    } else if (node->is_array() && !token.empty() && token.find_first_not_of("0123456789") == std::string::npos &&
               std::stoul(token) < node->size()) {
      node = &(*node)[std::stoul(token)];
    } else {
      DI_FAIL("$ref '{}': the pointer '{}' names nothing in the schema", ref, fragment);
    }
    node_base = base_of(node, node_base);
    i = j + 1;
  }
  return {node, node_base};
}

}  // namespace di::grammar::json_detail
