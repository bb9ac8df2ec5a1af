// builtin_configs.cpp — the table of built-in named configs (see the header).
// Each entry sets every field by name; its description is its purpose followed by
// the fields and the derived d_inner (di) and dt_rank (dr), so no number is written twice.
#include "core/builtin_configs.hpp"

#include <sstream>

namespace mc::ref {

namespace {

// A table row: Entry("name", "why it is in the set").d_model(..)...T(..).
class Entry {
 public:
  Entry(const char* name, const char* purpose) : purpose_(purpose) { c_.name = name; }
  Entry& d_model(int v) { return c_.cfg.d_model = v, *this; }
  Entry& d_state(int v) { return c_.cfg.d_state = v, *this; }
  Entry& d_conv(int v) { return c_.cfg.d_conv = v, *this; }
  Entry& expand(int v) { return c_.cfg.expand = v, *this; }
  Entry& n_layers(int v) { return c_.cfg.n_layers = v, *this; }
  Entry& input_dim(int v) { return c_.cfg.input_dim = v, *this; }
  Entry& eps(double v) { return c_.cfg.eps = v, *this; }
  Entry& B(int64_t v) { return c_.B = v, *this; }
  Entry& T(int64_t v) { return c_.T = v, *this; }

  // Validated, with the description derived from the fields.
  NamedConfig done() const {
    NamedConfig c = c_;
    const Dims d = Dims::from(c.cfg);
    validate_runtime(d, c.B, c.T);
    std::ostringstream os;
    os << purpose_ << " (dm " << d.dm << ", di " << d.di << ", ds " << d.ds << ", dc " << d.dc
       << ", dr " << d.dr << ", L " << d.L << ", mid " << d.mid << ", B " << c.B << ", T " << c.T
       << ", eps " << d.eps << ")";
    c.description = os.str();
    return c;
  }

 private:
  NamedConfig c_;
  const char* purpose_;
};

std::vector<NamedConfig> build_table() {
  std::vector<NamedConfig> v;
  v.push_back(Entry("tiny", "everything small")
                  .d_model(8).d_state(4).d_conv(3).expand(2).n_layers(2).input_dim(5)
                  .B(2).T(7).eps(1e-5).done());
  v.push_back(Entry("dconv1-t1", "edge case: the conv is a per-channel scale, one timestep")
                  .d_model(8).d_state(4).d_conv(1).expand(2).n_layers(2).input_dim(4)
                  .B(2).T(1).eps(1e-5).done());
  v.push_back(Entry("odd", "odd sizes (d_inner not a multiple of 4), a non-default eps")
                  .d_model(13).d_state(7).d_conv(2).expand(3).n_layers(3).input_dim(11)
                  .B(3).T(17).eps(1e-6).done());
  v.push_back(Entry("small", "the size of mamba-rs's parity tests")
                  .d_model(32).d_state(16).d_conv(4).expand(2).n_layers(2).input_dim(20)
                  .B(2).T(33).eps(1e-5).done());
  v.push_back(Entry("dstate-128", "d_state above the sequential kernel's register limit "
                                  "(Sequential mode runs the chunked scan)")
                  .d_model(16).d_state(128).d_conv(4).expand(2).n_layers(1).input_dim(8)
                  .B(2).T(5).eps(1e-5).done());
  v.push_back(Entry("scan-t257", "one step past mamba-rs's sequential-to-parallel scan threshold")
                  .d_model(16).d_state(16).d_conv(4).expand(2).n_layers(1).input_dim(16)
                  .B(1).T(257).eps(1e-5).done());
  v.push_back(Entry("mamba-rs-default", "mamba-rs MambaConfig::default()")
                  .d_model(128).d_state(16).d_conv(4).expand(2).n_layers(3).input_dim(128)
                  .B(2).T(32).eps(1e-5).done());
  v.push_back(Entry("mamba-130m-layer", "one layer of mamba-130m")
                  .d_model(768).d_state(16).d_conv(4).expand(2).n_layers(1).input_dim(768)
                  .B(1).T(16).eps(1e-5).done());
  return v;
}

}  // namespace

const std::vector<NamedConfig>& builtin_configs() {
  static const std::vector<NamedConfig> table = build_table();
  return table;
}

const NamedConfig& builtin_config(const std::string& name) {
  for (const NamedConfig& c : builtin_configs())
    if (c.name == name) return c;
  std::string names;
  for (const NamedConfig& c : builtin_configs()) names += (names.empty() ? "" : ", ") + c.name;
  throw ConfigError("config = '" + name + "' is not a built-in config; valid names: " + names);
}

}  // namespace mc::ref
