#include "ddp/same_units.h"

#include <algorithm>
#include <map>
#include <string_view>
#include <tuple>
#include <vector>

#include "dist/every_rank.h"
#include "util/error.h"
#include "util/fnv.h"
#include "util/strings.h"

namespace ddptrain {
namespace {

enum class Place : int64_t { kUnitBuilt = 1, kModelBuilt = 2 };

// Where a rank is, in the one shape every such collective has.
struct Record {
  Place place;
  int64_t count;  // the unit's index, or the model's number of units
  uint64_t hash;
  bool operator<(const Record& o) const {
    return std::tie(place, count, hash) < std::tie(o.place, o.count, o.hash);
  }
  bool operator==(const Record& o) const { return place == o.place && count == o.count && hash == o.hash; }
};

std::string describe_unit(const Units& units, size_t unit) {
  std::string s = str("'", units.name(unit), "'",
                      units.backward_reads_parameters(unit) ? "" : " (backward reads no parameters)", ":");
  const char* sep = " ";
  for (const auto& item : units.modules()[unit]->named_parameters()) {
    s += ddptrain::str(sep, item.key(), " ", item.value().sizes(), " ",
                       c10::toString(item.value().scalar_type()),
                       item.value().requires_grad() ? "" : " frozen");
    sep = "; ";
  }
  return s;
}

std::string describe(const Record& r) {
  return r.place == Place::kUnitBuilt
             ? str("built unit ", r.count, " (description ", hex16(r.hash), ")")
             : str("had built its whole model, ", r.count, r.count == 1 ? " unit" : " units",
                   " (description ", hex16(r.hash), ")");
}

std::vector<Record> gather(const Record& mine, const DistContext& ctx) {
  std::vector<Record> out;
  for (const auto& v :
       gathered_values(ctx, {static_cast<int64_t>(mine.place), mine.count, static_cast<int64_t>(mine.hash)},
                       "zero_stage 3: the ranks' units (Note [The ranks build the same units])"))
    out.push_back(Record{static_cast<Place>(v[0]), v[1], static_cast<uint64_t>(v[2])});
  return out;
}

void check(const Record& mine, const std::string& here, const DistContext& ctx) {
  if (!ctx.communicates()) return;
  const std::vector<Record> all = gather(mine, ctx);
  std::map<Record, std::vector<int>> ranks_at;
  for (size_t r = 0; r < all.size(); ++r) ranks_at[all[r]].push_back(static_cast<int>(r));
  if (ranks_at.size() == 1) return;
  std::vector<std::pair<Record, std::vector<int>>> by_first_rank(ranks_at.begin(), ranks_at.end());
  std::sort(by_first_rank.begin(), by_first_rank.end(),
            [](const auto& a, const auto& b) { return a.second[0] < b.second[0]; });
  std::string places;
  for (const auto& [record, ranks] : by_first_rank) {
    std::string who;
    for (size_t i = 0; i < ranks.size() && i < 8; ++i) who += str(i ? "," : "", ranks[i]);
    if (ranks.size() > 8) who += ",...";
    places +=
        str(places.empty() ? "" : "; ", ranks.size() == 1 ? "rank " : "ranks ", who, " ", describe(record));
  }
  throw Error(
      str("[rank ", ctx.rank(), "/", ctx.world_size(),
          "] zero_stage 3: the ranks do not build the same units (", places, "); this rank ", here,
          ". Every rank's model must add the same units, with the same parameters and UnitBackward, ",
          "in the same order, and be built with a UnitSink on every rank or on none (Note [The ranks ",
          "build the same units])"));
}

uint64_t hash_unit(const Units& units, size_t unit, uint64_t h = kFnvOffset) {
  return fnv1a(describe_unit(units, unit), h);
}

}  // namespace

void check_ranks_built_the_same_unit(const Units& units, size_t unit, const DistContext& ctx) {
  const Record mine{Place::kUnitBuilt, static_cast<int64_t>(unit), hash_unit(units, unit)};
  check(mine, str("built unit ", unit, " ", describe_unit(units, unit)), ctx);
}

void check_ranks_built_the_same_units(const Units* units, const DistContext& ctx) {
  const size_t n = units ? units->size() : 0;
  uint64_t h = kFnvOffset;
  for (size_t u = 0; u < n; ++u) {
    h = hash_unit(*units, u, h);
    h = fnv1a(std::string_view(units->built_shard(u) ? "sharded as built\n" : "built whole\n"), h);
  }
  std::string here = str("had built its whole model, ", n, n == 1 ? " unit" : " units");
  for (size_t u = 0; u < n && u < 4; ++u)
    here += str(u ? ", " : " (", "'", units->name(u), "'",
                units->backward_reads_parameters(u) ? "" : " whose backward reads no parameters",
                units->built_shard(u) ? " sharded as built" : "");
  if (n > 0) here += n > 4 ? ", ...)" : ")";
  check(Record{Place::kModelBuilt, static_cast<int64_t>(n), h}, here, ctx);
}

}  // namespace ddptrain
