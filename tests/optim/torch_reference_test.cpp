// Cross-check against PyTorch 1.13 itself: the expected parameters below were printed by
// torch.optim on the fixture of optim_test_util.h, with two parameter groups (w with the
// weight decay, b with weight_decay = 0) and lr set per step, by this script
// (/usr/bin/python3, torch 1.13):
//
//   import torch
//   P0 = [0.5, -1.0, 2.0, 0.25, -0.75]
//   G = [[0.1, -0.2, 0.3, -0.4, 0.05], [-0.3, 0.25, 0.1, 0.2, -0.15],
//        [0.05, 0.4, -0.2, -0.1, 0.3]]
//   LR = [0.1, 0.05, 0.02]
//   def run(cls, **kw):
//       w = torch.tensor(P0[:3], requires_grad=True)
//       b = torch.tensor(P0[3:], requires_grad=True)
//       wd = kw.pop('weight_decay', 0.0)
//       opt = cls([{'params': [w], 'weight_decay': wd},
//                  {'params': [b], 'weight_decay': 0.0}], lr=LR[0], **kw)
//       for t in range(3):
//           w.grad = torch.tensor(G[t][:3]); b.grad = torch.tensor(G[t][3:])
//           for g in opt.param_groups: g['lr'] = LR[t]
//           opt.step()
//           print(', '.join('%.9g' % x for x in torch.cat([w.detach(), b.detach()])))
//   run(torch.optim.SGD, momentum=0.9, nesterov=True, weight_decay=0.1)
//   run(torch.optim.SGD, momentum=0.9, weight_decay=0.1)
//   run(torch.optim.Adam, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
//   run(torch.optim.AdamW, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
//   run(torch.optim.RMSprop, alpha=0.99, eps=1e-8, momentum=0.9, weight_decay=0.1)
//   run(torch.optim.Adagrad, lr_decay=0.01, eps=1e-10, weight_decay=0.1)
#include "optim_test_util.h"

namespace braid::optim::test {
namespace {

// Torch's five numbers per step, laid out on the fixture (padding at index 3).
std::vector<std::vector<double>> from_torch(const std::vector<std::vector<double>>& rows) {
  std::vector<std::vector<double>> out;
  for (const auto& r : rows) out.push_back({r[0], r[1], r[2], kPad, r[3], r[4]});
  return out;
}

OptimizerConfig config(std::string name, float momentum, bool nesterov, float wd) {
  OptimizerConfig c;
  c.name = std::move(name);
  c.momentum = momentum;
  c.nesterov = nesterov;
  c.weight_decay = wd;
  return c;
}

// Tolerance 1e-6: braid keeps hyperparameters in float (1 - 0.99f is not torch's 1 - 0.99),
// which RMSprop's first step amplifies to ~5e-7.
void expect_torch(const OptimizerConfig& c, const std::vector<std::vector<double>>& rows) {
  auto opt = make_optimizer(c, example_segments(), kSize);
  expect_three_steps(*opt, from_torch(rows), 1e-6);
}

TEST(TorchReference, SgdNesterov) {
  expect_torch(config("sgd", 0.9f, true, 0.1f),
               {{0.471500009, -0.943000019, 1.90499997, 0.326000005, -0.759500027},
                {0.489445746, -0.945641518, 1.85715246, 0.323200017, -0.747275054},
                {0.487595022, -0.955396414, 1.84569919, 0.329592019, -0.756974041}});
}

TEST(TorchReference, SgdMomentum) {
  expect_torch(config("sgd", 0.9f, false, 0.1f),
               {{0.484999985, -0.969999969, 1.95000005, 0.289999992, -0.754999995},
                {0.490824997, -0.964149952, 1.91275001, 0.297999978, -0.749750018},
                {0.490940362, -0.968115628, 1.89951456, 0.302879989, -0.753859997}});
}

TEST(TorchReference, Adam) {
  expect_torch(config("adam", 0, false, 0.1f),
               {{0.400000036, -0.900000036, 1.89999998, 0.349999994, -0.849999964},
                {0.41549623, -0.887957811, 1.85234821, 0.363316834, -0.825290501},
                {0.416349649, -0.893842757, 1.83794558, 0.370125413, -0.833033681}});
}

TEST(TorchReference, AdamW) {
  expect_torch(config("adamw", 0, false, 0.1f),
               {{0.395000011, -0.889999986, 1.88, 0.349999994, -0.849999964},
                {0.417734504, -0.893686593, 1.82704675, 0.363316834, -0.825290501},
                {0.422449023, -0.903448045, 1.81884825, 0.370125413, -0.833033681}});
}

TEST(TorchReference, RmsPropMomentum) {
  expect_torch(config("rmsprop", 0.9f, false, 0.1f),
               {{-0.499999344, -2.71201145e-07, 1.00000012, 1.24999976, -1.74999809},
                {-0.490069628, 0.128958762, 0.363499284, 1.47549307, -1.72541845},
                {-0.487019539, 0.0295324754, 0.193010926, 1.60069144, -1.89371181}});
}

TEST(TorchReference, Adagrad) {
  OptimizerConfig c = config("adagrad", 0, false, 0.1f);
  c.lr_decay = 0.01f;
  expect_torch(c, {{0.400000006, -0.899999976, 1.89999998, 0.350000024, -0.850000024},
                   {0.442880481, -0.923296452, 1.87516248, 0.327860743, -0.803035498},
                   {0.437004358, -0.936452806, 1.87558591, 0.332139522, -0.820381641}});
}

}  // namespace
}  // namespace braid::optim::test
