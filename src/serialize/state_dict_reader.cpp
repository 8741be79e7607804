#include "serialize/state_dict_reader.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>

#include <caffe2/serialize/inline_container.h>

#include "util/error.h"

namespace ddptrain {
namespace {

// See Note [Reading torch.save files]: the values a state_dict pickle can hold.
struct Obj;
using Ref = std::shared_ptr<Obj>;
struct Global {
  std::string module, name;
};
using Items = std::vector<Ref>;
using Pairs = std::vector<std::pair<Ref, Ref>>;
struct Obj {
  enum Kind {
    kNone,
    kBool,
    kInt,
    kFloat,
    kStr,
    kTuple,
    kList,
    kDict,
    kGlobal,
    kStorage,
    kTensor,
    kMark
  } kind = kNone;
  int64_t i = 0;
  double f = 0;
  std::string s;
  Items items;  // tuple, list
  Pairs pairs;  // dict, in insertion order
  Global global;
  at::Tensor tensor;  // storage (flat) or tensor
};

Ref make(Obj::Kind k) {
  auto o = std::make_shared<Obj>();
  o->kind = k;
  return o;
}

// The storage classes torch.save names, by the dtype they hold.
const std::map<std::string, at::ScalarType>& storage_types() {
  static const std::map<std::string, at::ScalarType> m = {
      {"FloatStorage", at::kFloat},       {"DoubleStorage", at::kDouble}, {"HalfStorage", at::kHalf},
      {"BFloat16Storage", at::kBFloat16}, {"LongStorage", at::kLong},     {"IntStorage", at::kInt},
      {"ShortStorage", at::kShort},       {"CharStorage", at::kChar},     {"ByteStorage", at::kByte},
      {"BoolStorage", at::kBool}};
  return m;
}

class Machine {
 public:
  Machine(const std::string& pickle, caffe2::serialize::PyTorchStreamReader& zip, std::string origin)
      : p_(pickle), zip_(zip), origin_(std::move(origin)) {}

  Ref run() {
    for (;;) {
      const uint8_t op = u8();
      switch (op) {
        case 0x80:
          u8();
          break;  // PROTO
        case 0x95:
          skip(8);
          break;  // FRAME
        case '.':
          return pop();  // STOP
        case '(':
          push(make(Obj::kMark));
          break;  // MARK
        case 'N':
          push(make(Obj::kNone));
          break;
        case 0x88:
        case 0x89: {
          auto b = make(Obj::kBool);
          b->i = op == 0x88;
          push(b);
          break;
        }
        case 'J':
          push_int(static_cast<int32_t>(le(4)));
          break;
        case 'K':
          push_int(static_cast<int64_t>(le(1)));
          break;
        case 'M':
          push_int(static_cast<int64_t>(le(2)));
          break;
        case 0x8a: {  // LONG1: n little-endian two's-complement bytes
          const size_t n = u8();
          check(n <= 8, "an integer wider than 64 bits");
          uint64_t v = le(n);
          if (n > 0 && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~0ull << (8 * n);
          push_int(static_cast<int64_t>(v));
          break;
        }
        case 'G': {  // BINFLOAT, big-endian
          uint64_t v = 0;
          for (int k = 0; k < 8; ++k) v = (v << 8) | u8();
          auto o = make(Obj::kFloat);
          std::memcpy(&o->f, &v, 8);
          push(o);
          break;
        }
        case 'X':
          push_str(le(4));
          break;  // BINUNICODE
        case 0x8c:
          push_str(le(1));
          break;  // SHORT_BINUNICODE
        case 0x8d:
          push_str(le(8));
          break;  // BINUNICODE8
        case 'U':
          push_str(le(1));
          break;  // SHORT_BINSTRING (protocol 2 module names)
        case 'T':
          push_str(le(4));
          break;  // BINSTRING
        case ')':
          push(make(Obj::kTuple));
          break;
        case 0x85:
        case 0x86:
        case 0x87: {  // TUPLE1..3
          auto t = make(Obj::kTuple);
          t->items.resize(op - 0x84);
          for (size_t k = t->items.size(); k-- > 0;) t->items[k] = pop();
          push(t);
          break;
        }
        case 't': {
          auto t = make(Obj::kTuple);
          t->items = pop_to_mark();
          push(t);
          break;
        }
        case ']':
          push(make(Obj::kList));
          break;
        case 'l': {
          auto l = make(Obj::kList);
          l->items = pop_to_mark();
          push(l);
          break;
        }
        case 'a': {
          auto v = pop();
          top(Obj::kList)->items.push_back(v);
          break;
        }
        case 'e': {
          auto vs = pop_to_mark();
          auto& l = top(Obj::kList)->items;
          l.insert(l.end(), vs.begin(), vs.end());
          break;
        }
        case '}':
          push(make(Obj::kDict));
          break;
        case 'd': {
          auto d = make(Obj::kDict);
          set_items(d, pop_to_mark());
          push(d);
          break;
        }
        case 's': {
          auto v = pop();
          auto k = pop();
          set_items(top(Obj::kDict), {k, v});
          break;
        }
        case 'u': {
          auto kv = pop_to_mark();
          set_items(top(Obj::kDict), kv);
          break;
        }
        case 'q':
          memo_[le(1)] = peek();
          break;  // BINPUT
        case 'r':
          memo_[le(4)] = peek();
          break;  // LONG_BINPUT
        case 0x94: {
          const uint64_t n = memo_.size();
          memo_[n] = peek();
          break;
        }  // MEMOIZE
        case 'h':
          push(memo(le(1)));
          break;  // BINGET
        case 'j':
          push(memo(le(4)));
          break;     // LONG_BINGET
        case 'c': {  // GLOBAL "module\nname\n"
          auto g = make(Obj::kGlobal);
          g->global.module = line();
          g->global.name = line();
          push(g);
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          auto name = pop(), module = pop();
          check(name->kind == Obj::kStr && module->kind == Obj::kStr, "a malformed STACK_GLOBAL");
          auto g = make(Obj::kGlobal);
          g->global = {module->s, name->s};
          push(g);
          break;
        }
        case 'Q':
          push(persistent(pop()));
          break;  // BINPERSID: a storage
        case 'R': {
          auto args = pop();
          auto fn = pop();
          push(reduce(fn, args));
          break;
        }
        case 'b':
          pop();
          break;  // BUILD: OrderedDict._metadata / Parameter state; not needed
        case '0':
          pop();
          break;  // POP
        default:
          throw Error(detail::concat(origin_, ": unsupported pickle opcode 0x", hex(op), " at byte ",
                                     pos_ - 1, " (this reader takes state_dict files: {name: tensor})"));
      }
    }
  }

 private:
  void check(bool ok, const char* what) const {
    if (!ok) throw Error(detail::concat(origin_, ": ", what, " at byte ", pos_, " of its pickle"));
  }
  static std::string hex(uint8_t v) {
    const char* d = "0123456789abcdef";
    return {d[v >> 4], d[v & 15]};
  }
  uint8_t u8() {
    check(pos_ < p_.size(), "the pickle ends early (truncated?)");
    return static_cast<uint8_t>(p_[pos_++]);
  }
  void skip(size_t n) {
    check(pos_ + n <= p_.size(), "the pickle ends early (truncated?)");
    pos_ += n;
  }
  uint64_t le(size_t n) {
    uint64_t v = 0;
    for (size_t k = 0; k < n; ++k) v |= static_cast<uint64_t>(u8()) << (8 * k);
    return v;
  }
  std::string line() {
    const size_t end = p_.find('\n', pos_);
    check(end != std::string::npos, "an unterminated GLOBAL");
    std::string s = p_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return s;
  }
  void push(Ref o) { stack_.push_back(std::move(o)); }
  void push_int(int64_t v) {
    auto o = make(Obj::kInt);
    o->i = v;
    push(o);
  }
  void push_str(uint64_t n) {
    check(n <= p_.size() - pos_, "a string longer than the pickle");
    auto o = make(Obj::kStr);
    o->s = p_.substr(pos_, n);
    pos_ += n;
    push(o);
  }
  Ref pop() {
    check(!stack_.empty() && stack_.back()->kind != Obj::kMark, "a pop from an empty stack");
    Ref o = stack_.back();
    stack_.pop_back();
    return o;
  }
  Ref peek() const {
    check(!stack_.empty(), "a memo of an empty stack");
    return stack_.back();
  }
  Ref top(Obj::Kind k) const {
    check(!stack_.empty() && stack_.back()->kind == k, "a container opcode on the wrong type");
    return stack_.back();
  }
  Items pop_to_mark() {
    size_t m = stack_.size();
    while (m > 0 && stack_[m - 1]->kind != Obj::kMark) --m;
    check(m > 0, "a missing MARK");
    Items out(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m - 1);
    return out;
  }
  void set_items(const Ref& d, const Items& kv) {
    check(kv.size() % 2 == 0, "an odd number of dict items");
    for (size_t k = 0; k < kv.size(); k += 2) d->pairs.emplace_back(kv[k], kv[k + 1]);
  }
  Ref memo(uint64_t k) const {
    auto it = memo_.find(k);
    check(it != memo_.end(), "a reference to an unknown memo entry");
    return it->second;
  }

  // ('storage', torch.<T>Storage, key, location, numel): the bytes of archive record data/<key>.
  Ref persistent(const Ref& pid) {
    check(pid->kind == Obj::kTuple && pid->items.size() >= 5 && pid->items[0]->s == "storage" &&
              pid->items[1]->kind == Obj::kGlobal && pid->items[2]->kind == Obj::kStr,
          "a persistent id that is not a tensor storage");
    const Global& type = pid->items[1]->global;
    auto dt = storage_types().find(type.name);
    if (type.module != "torch" || dt == storage_types().end())
      throw Error(detail::concat(origin_, ": unsupported storage type ", type.module, ".", type.name));
    const std::string& key = pid->items[2]->s;
    auto cached = storages_.find(key);
    if (cached != storages_.end()) return cached->second;
    const std::string record = "data/" + key;
    if (!zip_.hasRecord(record))
      throw Error(detail::concat(origin_, ": the archive has no record ", record, " (damaged?)"));
    auto [data, nbytes] = zip_.getRecord(record);
    const int64_t itemsize = static_cast<int64_t>(c10::elementSize(dt->second));
    auto o = make(Obj::kStorage);
    o->tensor = at::empty({static_cast<int64_t>(nbytes) / itemsize}, at::TensorOptions().dtype(dt->second));
    std::memcpy(o->tensor.data_ptr(), data.get(), static_cast<size_t>(o->tensor.numel() * itemsize));
    storages_[key] = o;
    return o;
  }

  static std::vector<int64_t> ints(const Ref& t) {
    std::vector<int64_t> v;
    for (const auto& x : t->items) v.push_back(x->i);
    return v;
  }

  // The only callables a state_dict needs; anything else is refused, never run.
  Ref reduce(const Ref& fn, const Ref& args) {
    check(fn->kind == Obj::kGlobal && args->kind == Obj::kTuple, "a malformed REDUCE");
    const Global& g = fn->global;
    const Items& a = args->items;
    if (g.module == "collections" && g.name == "OrderedDict") return make(Obj::kDict);
    if (g.module == "torch._utils" && g.name == "_rebuild_tensor_v2") {
      check(a.size() >= 4 && a[0]->kind == Obj::kStorage && a[2]->kind == Obj::kTuple &&
                a[3]->kind == Obj::kTuple,
            "malformed tensor arguments");
      const auto size = ints(a[2]), stride = ints(a[3]);
      const int64_t offset = a[1]->i;
      int64_t last = offset;
      for (size_t d = 0; d < size.size(); ++d) last += size[d] > 0 ? (size[d] - 1) * stride[d] : 0;
      const int64_t numel = a[0]->tensor.numel();
      check(last < numel || std::any_of(size.begin(), size.end(), [](int64_t s) { return s == 0; }),
            "a tensor that reaches past its storage");
      auto o = make(Obj::kTensor);
      o->tensor = a[0]->tensor.as_strided(size, stride, offset);
      return o;
    }
    if (g.module == "torch._utils" && g.name == "_rebuild_parameter") {
      check(!a.empty() && a[0]->kind == Obj::kTensor, "malformed parameter arguments");
      return a[0];
    }
    throw Error(
        detail::concat(origin_, " asks to call ", g.module, ".", g.name,
                       ", which a state_dict does not need; refusing to load it (files are never executed)"));
  }

  const std::string& p_;
  caffe2::serialize::PyTorchStreamReader& zip_;
  std::string origin_;
  size_t pos_ = 0;
  std::vector<Ref> stack_;
  std::map<uint64_t, Ref> memo_;
  std::map<std::string, Ref> storages_;
};

bool is_tensor_dict(const Ref& d) {
  if (d->kind != Obj::kDict) return false;
  for (const auto& [k, v] : d->pairs)
    if (k->kind != Obj::kStr || v->kind != Obj::kTensor) return false;
  return true;
}

// What a pickle's root is, for the error when it is not a {name: tensor} dict.
const char* pickled_kind(const Obj& o) {
  switch (o.kind) {
    case Obj::kTensor:
      return "a single tensor";
    case Obj::kDict:
      return "a dict whose values are not all tensors (or whose keys are not all strings)";
    case Obj::kList:
      return "a list";
    case Obj::kTuple:
      return "a tuple";
    case Obj::kStr:
      return "a string";
    case Obj::kInt:
    case Obj::kFloat:
    case Obj::kBool:
      return "a number";
    default:
      break;
  }
  return "no tensors";
}

// LibTorch's reader appends a paragraph to miniz's reason ("This is an internal miniz error. If
// you are seeing this error, ..."): keep the reason, which the message then explains.
std::string zip_reason(const c10::Error& e) {
  std::string why = e.what_without_backtrace();
  if (const auto cut = why.find(". This is an internal miniz error"); cut != std::string::npos)
    why.resize(cut);
  return why;
}

}  // namespace

NamedTensors unpickle_tensors(const std::string& bytes, const std::string& origin, const char* expected) {
  std::istringstream in(bytes);
  Ref root;
  try {
    caffe2::serialize::PyTorchStreamReader zip(&in);
    DDP_CHECK(zip.hasRecord("data.pkl"), origin, " is not a torch.save file (no data.pkl in its archive)");
    auto [data, n] = zip.getRecord("data.pkl");
    const std::string pickle(static_cast<const char*>(data.get()), n);
    root = Machine(pickle, zip, origin).run();
  } catch (const c10::Error& e) {
    throw Error(
        detail::concat(origin, " is not a readable torch.save archive (", zip_reason(e),
                       "): a damaged or truncated file, or one from torch.save before PyTorch 1.6 or with "
                       "_use_new_zipfile_serialization=False (re-save it in the zip format)"));
  }
  // A bare state_dict, or a training checkpoint that holds one under "state_dict" or "model".
  if (!is_tensor_dict(root) && root->kind == Obj::kDict) {
    for (const auto& [k, v] : root->pairs)
      if (k->kind == Obj::kStr && (k->s == "state_dict" || k->s == "model") && is_tensor_dict(v)) {
        root = v;
        break;
      }
  }
  DDP_CHECK(is_tensor_dict(root), origin, " holds ", pickled_kind(*root), ", not ", expected);
  NamedTensors out;
  for (const auto& [k, v] : root->pairs) out.emplace_back(k->s, v->tensor);
  return out;
}

}  // namespace ddptrain
