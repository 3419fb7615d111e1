// Constants of the fp32 approximations shared by every ISA (scalar.cpp is the readable reference;
// vector files repeat its exact operation sequence so results are bit-identical).
//
// exp   : Cephes expf. n = round(x*log2e) via the 1.5*2^23 trick, r = x - n*ln2 (two-part ln2),
//         p(r) degree 5, y = (1 + r + r^2 p(r)) * 2^n. x clamped to [-87, 88]; x > 88 -> inf,
//         x < -87 -> 0 (irrelevant for fp16 outputs and softmax sums).
// log   : Cephes logf (mantissa in [sqrt(.5), sqrt(2)), degree 8 polynomial, two-part ln2).
// tanh  : Cephes tanhf: odd polynomial below 0.625, else 1 - 2/(exp(2|x|)+1).
// erfc  : Numerical Recipes erfcc (Chebyshev fit, relative error < 1.2e-7 for all z >= 0).
// sigmoid = 1/(1+exp(-x)); silu = x/(1+exp(-x)); gelu_tanh = x/(1+exp(-2u)) (= x*(1+tanh u)/2 without
// the cancellation for negative x); gelu_exact = x*Phi(x), Phi from erfc.
#pragma once

namespace orion::cpu::simd::mc {

constexpr float kExpHi = 88.0f, kExpLo = -87.0f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer (RNE)
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
constexpr float kExpP0 = 1.9875691500e-4f, kExpP1 = 1.3981999507e-3f, kExpP2 = 8.3334519073e-3f,
                kExpP3 = 4.1665795894e-2f, kExpP4 = 1.6666665459e-1f, kExpP5 = 5.0000001201e-1f;

constexpr float kSqrtHalf = 0.707106781186547524f;
constexpr float kLogP[9] = {7.0376836292e-2f,  -1.1514610310e-1f, 1.1676998740e-1f,
                            -1.2420140846e-1f, 1.4249322787e-1f,  -1.6668057665e-1f,
                            2.0000714765e-1f,  -2.4999993993e-1f, 3.3333331174e-1f};

constexpr float kTanhSmall = 0.625f;
constexpr float kTanhP[5] = {-5.70498872745e-3f, 2.06390887954e-2f, -5.37397155531e-2f,
                             1.33314422036e-1f, -3.33332819422e-1f};

constexpr float kGeluC = 0.044715f;
constexpr float kGeluK2 = -1.59576912160573071f;  // -2*sqrt(2/pi)
constexpr float kInvSqrt2 = 0.707106781186547524f;
// erfc(z) ~= t*exp(-z*z + poly(t)), t = 1/(1+z/2); poly coefficients from highest degree down.
constexpr float kErfcP[10] = {0.17087277f,  -0.82215223f, 1.48851587f, -1.13520398f, 0.27886807f,
                              -0.18628806f, 0.09678418f,  0.37409196f, 1.00002368f,  -1.26551223f};

}  // namespace orion::cpu::simd::mc
