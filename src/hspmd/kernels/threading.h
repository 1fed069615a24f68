// Thread count used by every CPU kernel (OpenMP, which oneDNN's GEMMs share) and by OpenBLAS. A
// process running one rank per core sets 1; the default is the number of cores.
#pragma once

namespace hspmd::kernels {

void set_num_threads(int n);  // n >= 1; throws Error otherwise
int num_threads();

}  // namespace hspmd::kernels
