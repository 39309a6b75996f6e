// Where `$ref`s lead: every schema resource of the document by its absolute URI (`$id`, the
// draft-4 `id`), anchors (`$anchor`, draft-7 `$id: "#name"`), JSON pointers inside resources,
// and the base URI in force at each subschema. Only the document itself is searched: a remote
// reference is a clear error.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <unordered_map>

namespace di::grammar::json_detail {

using json = nlohmann::ordered_json;

/// RFC 3986 reference resolution (enough of it for schema identifiers).
std::string resolve_uri(const std::string& base, const std::string& ref);

class schema_index {
 public:
  /// Indexes `root` and the extra `documents` (all must outlive the index). `legacy_id`: draft 4
  /// style `id`; `ref_hides_id`: draft 7 and older ignore an `$id` beside `$ref`.
  schema_index(const json& root, const std::vector<std::pair<std::string, json>>& documents, bool legacy_id,
               bool ref_hides_id);

  struct target {
    const json* schema;
    std::string base;  ///< base URI in force at the target
  };
  /// The schema `ref` names when written where `base` is in force; di::error if unknown.
  target resolve(const std::string& base, const std::string& ref) const;
  /// Base URI in force inside `schema` (a subschema of the document).
  std::string base_of(const json* schema, const std::string& parent_base) const;
  const std::string& root_base() const { return root_base_; }
  /// Where $dynamicRef (or, `recursive`, $recursiveRef) `ref` lands when every evaluation
  /// starts at the root: the static target unless it is a dynamic anchor, else the root's
  /// anchor of that name when the root resource has one, else the only resource defining it.
  /// Null when several resources define it and the dynamic scope would decide.
  std::optional<target> resolve_dynamic(const std::string& base, const std::string& ref, bool recursive) const;

 private:
  void walk(const json& node, const std::string& base, int depth);

  bool legacy_id_;
  bool ref_hides_id_;
  std::string root_base_;
  std::unordered_map<std::string, const json*> resources_;  // absolute URI -> resource root
  std::unordered_map<std::string, const json*> anchors_;    // "uri#name" -> schema
  std::unordered_map<const json*, std::string> bases_;      // schema -> base in force
  std::unordered_map<std::string, std::vector<std::string>> dynamic_anchors_;  // name -> resources
  std::vector<std::string> recursive_anchors_;  // resources whose root has $recursiveAnchor: true
  const json* root_ = nullptr;
};

}  // namespace di::grammar::json_detail
