#include "train/optimizer_options.h"

#include "util/error.h"
#include "util/strings.h"

namespace ddptrain {

void OptimizerOptions::validate() const {
  constexpr const char* kOwner = "OptimizerOptions";
  for (const auto& [beta, name] :
       {std::pair{&adam_beta1, "adam_beta1"}, std::pair{&adam_beta2, "adam_beta2"}})
    if (!(*beta >= 0 && *beta < 1))
      throw OptionError({{beta, name}}, str("{0}=", *beta, " must be in [0, 1); pass e.g. 0.9 and 0.95"),
                        kOwner);
  check_option_positive(lr, "lr", "pass e.g. {0:0.01}", kOwner);
  // Beyond these the step overflows fp32 (LibTorch's "cannot be converted to type float").
  if (!(lr <= 1e6))
    throw OptionError({{&lr, "lr"}}, str("{0}=", lr, " must be at most 1e6; pass e.g. {0:0.01}"), kOwner);
  if (!(weight_decay <= 1e6))
    throw OptionError({{&weight_decay, "weight_decay"}},
                      str("{0}=", weight_decay, " must be at most 1e6; pass e.g. {0:1e-4}"), kOwner);
  const OptimizerOptions defaults;
  if (optimizer == OptimizerKind::kSgd &&
      (adam_beta1 != defaults.adam_beta1 || adam_beta2 != defaults.adam_beta2))
    throw OptionError({{&adam_beta1, "adam_beta1"}, {&adam_beta2, "adam_beta2"}, {&optimizer, "optimizer"}},
                      str("{0} and {1} apply to {2:adamw}; {2:sgd} has momentum instead: drop them"), kOwner);
  if (!(momentum >= 0 && momentum < 1))
    throw OptionError({{&momentum, "momentum"}},
                      str("{0}=", momentum, " must be in [0, 1); pass e.g. {0:0.9}"), kOwner);
  check_option_non_negative(weight_decay, "weight_decay", "pass e.g. {0:1e-4}", kOwner);
}

}  // namespace ddptrain
