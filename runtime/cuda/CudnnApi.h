//===- CudnnApi.h - The few cuDNN 9 declarations amp-run uses ---*- C++ -*-===//
//
// amp-run opens cuDNN at run time (CudnnLoader.cpp) and must build where no
// cuDNN headers are installed (the GPU machine's cuDNN comes from PyTorch's
// nvidia-cudnn wheel, the runtime-only build has only the CUDA toolkit). So
// the handful of types, enum values and entry points of cuDNN 9's legacy
// convolution API it calls are declared here, with the values of cuDNN 9's
// documented ABI (cudnn_graph_v9.h, cudnn_ops_v9.h, cudnn_cnn_v9.h);
// test/unit/CudnnTest.cpp checks them against the headers where those exist.
// Plain C++: no CUDA header either (a stream is passed as void *).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>

namespace ampc::rt::cuda::cudnn {

// Opaque handles.
using Handle = struct cudnnContext *;
using TensorDesc = struct cudnnTensorStruct *;
using FilterDesc = struct cudnnFilterStruct *;
using ConvDesc = struct cudnnConvolutionStruct *;

// Enumerations, as int (cuDNN's enums are int-sized).
using Status = int;
inline constexpr Status kStatusSuccess = 0;     // CUDNN_STATUS_SUCCESS
inline constexpr int kDataFloat = 0;            // CUDNN_DATA_FLOAT
inline constexpr int kDataHalf = 2;             // CUDNN_DATA_HALF
inline constexpr int kDataBfloat16 = 9;         // CUDNN_DATA_BFLOAT16
inline constexpr int kTensorNchw = 0;           // CUDNN_TENSOR_NCHW
inline constexpr int kCrossCorrelation = 1;     // CUDNN_CROSS_CORRELATION
inline constexpr int kDefaultMath = 0;          // CUDNN_DEFAULT_MATH
inline constexpr int kTensorOpMath = 1;         // CUDNN_TENSOR_OP_MATH
inline constexpr int kTensorOpMathAllowConversion = 2; // CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION
inline constexpr int kFmaMath = 3;              // CUDNN_FMA_MATH
inline constexpr int kDeterministic = 1;        // CUDNN_DETERMINISTIC

/// cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t: the three share this
/// layout (the algorithm is the direction's own enum).
struct AlgoPerf {
  int algo;
  Status status;
  float time;
  size_t memory;
  int determinism;
  int mathType;
  int reserved[3];
};

/// The entry points, bound by name (CudnnLoader.cpp).
struct Api {
  Status (*create)(Handle *);
  Status (*destroy)(Handle);
  Status (*setStream)(Handle, void *stream);
  const char *(*getErrorString)(Status);
  size_t (*getVersion)();
  Status (*createTensor)(TensorDesc *);
  Status (*setTensorNd)(TensorDesc, int dataType, int nbDims, const int dims[],
                        const int strides[]);
  Status (*destroyTensor)(TensorDesc);
  Status (*createFilter)(FilterDesc *);
  Status (*setFilterNd)(FilterDesc, int dataType, int format, int nbDims, const int dims[]);
  Status (*destroyFilter)(FilterDesc);
  Status (*createConv)(ConvDesc *);
  Status (*setConvNd)(ConvDesc, int arrayLength, const int pads[], const int strides[],
                      const int dilations[], int mode, int computeType);
  Status (*setConvGroupCount)(ConvDesc, int);
  Status (*setConvMathType)(ConvDesc, int);
  Status (*destroyConv)(ConvDesc);
  Status (*getFwdAlgorithm)(Handle, TensorDesc x, FilterDesc w, ConvDesc, TensorDesc y,
                            int requested, int *returned, AlgoPerf *);
  Status (*getBwdDataAlgorithm)(Handle, FilterDesc w, TensorDesc dy, ConvDesc, TensorDesc dx,
                                int requested, int *returned, AlgoPerf *);
  Status (*getBwdFilterAlgorithm)(Handle, TensorDesc x, TensorDesc dy, ConvDesc, FilterDesc dw,
                                  int requested, int *returned, AlgoPerf *);
  Status (*fwdWorkspaceSize)(Handle, TensorDesc x, FilterDesc w, ConvDesc, TensorDesc y, int algo,
                             size_t *);
  Status (*bwdDataWorkspaceSize)(Handle, FilterDesc w, TensorDesc dy, ConvDesc, TensorDesc dx,
                                 int algo, size_t *);
  Status (*bwdFilterWorkspaceSize)(Handle, TensorDesc x, TensorDesc dy, ConvDesc, FilterDesc dw,
                                   int algo, size_t *);
  Status (*forward)(Handle, const void *alpha, TensorDesc x, const void *xData, FilterDesc w,
                    const void *wData, ConvDesc, int algo, void *ws, size_t wsBytes,
                    const void *beta, TensorDesc y, void *yData);
  Status (*backwardData)(Handle, const void *alpha, FilterDesc w, const void *wData,
                         TensorDesc dy, const void *dyData, ConvDesc, int algo, void *ws,
                         size_t wsBytes, const void *beta, TensorDesc dx, void *dxData);
  Status (*backwardFilter)(Handle, const void *alpha, TensorDesc x, const void *xData,
                           TensorDesc dy, const void *dyData, ConvDesc, int algo, void *ws,
                           size_t wsBytes, const void *beta, FilterDesc dw, void *dwData);
};

} // namespace ampc::rt::cuda::cudnn
